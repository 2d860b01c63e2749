"""The background supervisor of one run (or of a sweep of runs, one after another).

``python -m lab.engine.supervise.supervisor RUN_DIR`` (or ``--sweep FILE``), started detached by
the launcher so a run outlives the dashboard, starts run.json's command as its child in a new
session (output to RUN_DIR/stdout.log, in run.json's ``cwd`` if any) and follows it, or an adopted
orphan (``lab.engine.supervise.adopt``), in one loop (``RunSupervisor.watch``): status.json kept
up to date (atomically; a full disk never crashes it; ``kind``, ``events_dirs``, ``resumed_from``),
devices sampled into RUN_DIR/sys, what else used the machine (``interference``), the health watch
(``lab.engine.health.watch``: ``health``, ``restarts``, stacks), a stop on ``stop.request`` or
SIGTERM (SIGTERM to the groups, SIGKILL after the grace, stragglers by the recorded tree), and a
diagnosis of a non-zero exit. It is status.json's writer (docs/contracts.md). It never imports
torch."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from pathlib import Path

from lab.engine import procs, spawn
from lab.engine.health.watch import HealthWatch
from lab.engine.queue.idle import wait_idle
from lab.engine.queue.ticket import turn
from lab.engine.spec.diagnosis import Diagnosis, supervisor_failure
from lab.engine.supervise.attempts import fresh_port, set_aside_attempt
from lab.engine.supervise.diagnose import GENERIC, diagnose
from lab.engine.supervise.linked import EventLinker
from lab.engine.supervise.status import Status
from lab.runfolder import (
    FAILED,
    QUEUED,
    REPO_ROOT,
    RUN_JSON,
    RUNNING,
    STARTING,
    STATUS_JSON,
    STDOUT_LOG,
    STOP_REQUEST,
    STOPPED,
    SUCCEEDED,
    SUPERVISOR_LOG,
    now_iso,
    read_json,
)

log = logging.getLogger("lab.engine.supervise.supervisor")

_TICK_S = 0.2  # how fast a stop request is noticed; each wake-up costs the trainer a little CPU
_INTERFERENCE_EVERY = 5  # samples between interference records in status.json (each is a rewrite)
_PORT_RETRIES = 2


class _Flags:
    stop_all = False  # set by SIGTERM: stop the current run and cancel the rest


def _stop_request(run_dir: Path) -> dict | None:
    req = run_dir / STOP_REQUEST
    if _Flags.stop_all:
        return {"grace_s": 5.0}
    if req.exists():
        return read_json(req) or {"grace_s": 5.0}
    return None


class RunSupervisor:
    """Runs one run folder to a final state."""

    def __init__(self, run_dir: Path, interval_s: float, on_tick=None) -> None:
        self.run_dir = run_dir
        self.interval_s = interval_s
        self.on_tick = on_tick or (lambda: None)
        self.run = read_json(run_dir / RUN_JSON) or {}
        self.status = Status(run_dir)
        self.me = [os.getpid(), procs.create_time(os.getpid())]
        self.linker = EventLinker(self.run, run_dir)  # events_dirs: where the run's curves are
        self.health = HealthWatch(
            run_dir, self.run, self.status.update, self.status.data.get("health")
        )

    def _start(self, argv: list[str]) -> spawn.Popen:
        env = dict(os.environ)
        env.update({k: str(v) for k, v in (self.run.get("env") or {}).items()})
        # a script's own folder
        child = spawn.start(
            argv, self.run_dir / STDOUT_LOG, cwd=self.run.get("cwd") or REPO_ROOT, env=env
        )
        self.status.update(
            state=RUNNING,
            pid=child.pid,
            pgid=child.pid,
            pid_ct=procs.create_time(child.pid),
            tree=[],
            exit_code=None,
            signal=None,
        )
        log.info("started pid %s: %s", child.pid, argv)
        return child

    def watch(self, child: spawn.Process, sampler) -> tuple[int, dict | None]:
        """The one loop of a run on this machine, started here or adopted: poll ``child``, sample
        every interval, record the tree, tick the health watch, stop it on a request; return
        (exit code, stop request)."""
        next_sample = 0.0
        known: list[list[float]] = []
        while True:
            rc = child.poll()
            if rc is not None:
                return rc, None
            req = _stop_request(self.run_dir)
            if req is not None:
                return self._stop(child, known, float(req.get("grace_s", 5.0))), req
            if time.monotonic() >= next_sample:
                next_sample = time.monotonic() + self.interval_s
                tree = procs.tree(child.pid)
                # the union of every member seen: a straggler may outlive its parent
                new = [i for i in procs.identities(tree) if i[0] not in {p for p, _ in known}]
                if new:
                    known = sorted(known + new)
                    self.status.update(tree=known)
                self.linker.note(p for p, _ in known)
                if self.linker.scan():
                    self.status.update(events_dirs=self.linker.dirs)
                values: dict[str, float] = {}
                if sampler is not None:
                    try:
                        values = sampler.sample(tree)
                        if sampler.step % _INTERFERENCE_EVERY == 0:
                            self.status.update(
                                interference=sampler.interference(),
                                train_processes=sampler.train_processes(),
                            )
                    except Exception as e:  # a sampling hiccup must never fail the run
                        log.warning("sampling failed: %s", e)
                self.health.tick(child.pid, tree, values, self.linker.dirs)
            self.on_tick()
            time.sleep(_TICK_S)

    def _stop(self, child: spawn.Process, known: list[list[float]], grace_s: float) -> int:
        log.info("stopping pid %s (grace %.1f s)", child.pid, grace_s)
        by_pid = {int(p): ct for p, ct in known + procs.identities(procs.tree(child.pid))}
        by_pid.setdefault(child.pid, self.status.data.get("pid_ct"))
        members = [[p, ct] for p, ct in sorted(by_pid.items())]
        self.status.update(stopping=True, tree=members)
        procs.end_tree(members, [child.pid], grace_s)
        try:
            return child.wait(timeout=5)
        except spawn.TimeoutExpired:
            child.kill()
            return child.wait()

    def sampler(self):
        """The device sampler of the run's GPUs (None when it cannot start: the run goes on)."""
        gpus = tuple((self.run.get("config") or {}).get("gpus") or ())
        try:
            from lab.engine.supervise.sampler import SysSampler

            return SysSampler(self.run_dir, gpus)
        except Exception as e:  # the run goes on without sys/ events rather than not at all
            log.warning("no device sampling for this run: %s", e)
            return None

    def run_to_end(self) -> str:
        if _stop_request(self.run_dir) is not None:
            self.status.update(
                state=STOPPED,
                ended_at=now_iso(),
                supervisor_pid=self.me[0],
                supervisor_ct=self.me[1],
            )
            return STOPPED
        self.status.update(
            state=STARTING,
            supervisor_pid=self.me[0],
            supervisor_ct=self.me[1],
            started_at=now_iso(),
            kind=self.linker.kind,
            events_dirs=self.linker.dirs,
            resumed_from=self.run.get("resumed_from"),
        )
        sampler = None
        argv = list(self.run.get("argv") or [])
        try:
            for attempt in range(_PORT_RETRIES + 1):
                argv, port = fresh_port(argv, force=attempt > 0)
                if port:
                    self.status.update(port=port)
                started = time.monotonic()
                child = self._start(argv)
                if sampler is None:
                    sampler = self.sampler()  # after the start: tensorboard takes ~0.5 s to import
                rc, req = self.watch(child, sampler)
                if (
                    req is None
                    and rc != 0
                    and attempt < _PORT_RETRIES
                    and port
                    and time.monotonic() - started < 60
                ):
                    d = diagnose(self.run_dir, rc)
                    if d is not None and d.key == "port_in_use":
                        log.warning("port %s was taken; retrying on another", port)
                        set_aside_attempt(self.run_dir, attempt)
                        continue
                break
            if sampler is not None:
                # written with the final state
                self.status.data["interference"] = sampler.interference()
                self.status.data["train_processes"] = sampler.train_processes()
            return self.finish(rc, req)
        finally:
            if sampler is not None:
                sampler.close()

    def finish(self, rc: int, req: dict | None) -> str:
        """Record the run's end: its state from ``rc`` and the stop request ``req``, with the
        diagnosis of a failure and what the health watch found."""
        self.linker.scan(force=True)  # a script that ran less than a scan interval is linked too
        self.health.finish(self.linker.dirs)  # what the ended run left: a NaN loss, its restarts
        fields = dict(
            exit_code=rc,
            signal=-rc if rc < 0 else None,
            ended_at=now_iso(),
            stopping=False,
            events_dirs=self.linker.dirs,
        )
        if req is not None:
            state, diag = STOPPED, None
        elif rc == 0:
            state, diag = SUCCEEDED, None
        else:
            state = FAILED
            try:
                diag = diagnose(self.run_dir, rc)
            except Exception as e:  # a diagnosis bug must not hide the failure itself
                log.exception("diagnosis failed")
                diag = Diagnosis(
                    "unknown",
                    f"the run exited with code {rc}",
                    f"diagnosis failed: {e}",
                    exit_code=rc,
                )
            found = self.health.diagnosis()  # a health finding explains more than a generic crash
            if found and (diag is None or diag.key in GENERIC):
                diag = Diagnosis("nan_loss", *found, exit_code=rc)
        self.status.update(state=state, diagnosis=diag.to_dict() if diag else None, **fields)
        log.info("run %s: %s (exit %s)", self.run_dir.name, state, rc)
        return state


def supervise(run_dir: Path, interval_s: float, on_tick=None) -> str:
    """Run one run to its end; a supervisor error is recorded as the run's failure, never left
    "running"."""
    sup = RunSupervisor(run_dir, interval_s, on_tick)
    try:
        return sup.run_to_end()
    except Exception as e:
        log.exception("supervisor failed")
        procs.end_recorded(sup.status.data, 2.0)
        log_path = run_dir / SUPERVISOR_LOG
        where = log_path if log_path.exists() else "the sweep log under .sweeps/"
        sup.status.update(
            state=FAILED,
            ended_at=now_iso(),
            diagnosis=supervisor_failure(f"the supervisor failed: {e}", f"see {where}").to_dict(),
        )
        return "error"


def _mark(run_dir: Path, **kw) -> None:
    Status(run_dir).update(**kw)


def _gpus(run_dirs: list[Path]) -> list[int]:
    cfgs = [(read_json(d / RUN_JSON) or {}).get("config") or {} for d in run_dirs]
    return sorted({int(g) for c in cfgs for g in c.get("gpus") or []})


def supervise_queued(run_dir: Path, interval_s: float) -> str:
    """Wait for the run's turn in the runs folder's queue (``lab.engine.queue``), then run it."""
    me = [os.getpid(), procs.create_time(os.getpid())]
    run = read_json(run_dir / RUN_JSON) or {}
    exclusive = bool(run.get("exclusive"))

    def mark(queue: dict | None) -> None:
        # The supervisor's pid goes in with the wait's place in line, or with the start: the
        # launcher returns on the first, so a run it hands back is either started or waiting.
        up = {"supervisor_pid": me[0], "supervisor_ct": me[1]} if queue else {}
        _mark(run_dir, queue=queue, **up)

    with turn(
        run_dir.parent,
        run_dir.name,
        [run_dir.name],
        _gpus([run_dir]),
        exclusive,
        mark,
        lambda: _stop_request(run_dir) is not None,
    ):
        if run.get("wait_for_idle"):  # its turn came; now until foreign work is gone too
            wait_idle(
                _gpus([run_dir]),
                lambda why: mark({"position": 0, "waiting_for": [why]}),
                lambda: _stop_request(run_dir) is not None,
            )
        return supervise(run_dir, interval_s)  # a cancelled wait: it records the run stopped


def run_sweep(sweep_file: Path, interval_s: float) -> None:
    sweep = read_json(sweep_file) or {}
    root = Path(sweep.get("runs_dir") or sweep_file.parent.parent)
    run_dirs = [root / r for r in sweep.get("run_ids") or []]
    me = [os.getpid(), procs.create_time(os.getpid())]

    def queued(d: Path) -> bool:
        return (read_json(d / STATUS_JSON) or {"state": QUEUED}).get("state") == QUEUED

    # recorded so the registry can tell a dead sweep's queued runs are lost (and a sweep started
    # again, lab.engine.supervise.adopt.requeue_orphans, leaves its ended runs as they are)
    for d in filter(queued, run_dirs):
        _mark(d, supervisor_pid=me[0], supervisor_ct=me[1])

    def cancel_requested() -> None:
        for d in run_dirs:
            if (d / STOP_REQUEST).exists() and queued(d):
                _mark(d, state=STOPPED, ended_at=now_iso())

    def mark(**kw) -> None:
        for d in run_dirs:
            if queued(d):
                _mark(d, **kw)

    with turn(  # the whole sweep is one entry: a second sweep queues behind it whole
        root,
        str(sweep.get("sweep_id") or sweep_file.stem),
        [d.name for d in run_dirs],
        _gpus(run_dirs),
        bool(sweep.get("exclusive", True)),  # a sweep measures: the machine to itself
        mark,
        lambda: _Flags.stop_all or all((d / STOP_REQUEST).exists() for d in run_dirs if queued(d)),
    ):
        _run_sweep_runs(run_dirs, interval_s, queued, cancel_requested)


def _run_sweep_runs(run_dirs: list[Path], interval_s: float, queued, cancel_requested) -> None:
    for d in (d for d in run_dirs if queued(d)):
        if _Flags.stop_all:
            _mark(d, state=STOPPED, ended_at=now_iso())
        else:
            supervise(d, interval_s, on_tick=cancel_requested)


def _on_sigterm(signum, frame) -> None:
    _Flags.stop_all = True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m lab.engine.supervise.supervisor", description=__doc__.splitlines()[0]
    )
    ap.add_argument("run_dir", nargs="?", help="the run folder to supervise")
    ap.add_argument(
        "--sweep", help="a sweep file (runs/.sweeps/<id>.json): run its runs one after another"
    )
    ap.add_argument(
        "--interval",
        type=float,
        default=float(os.environ.get("LAB_SAMPLE_INTERVAL_S", "1.0")),
        help="seconds between device samples (default 1)",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, _on_sigterm)
    if args.sweep:
        run_sweep(Path(args.sweep), args.interval)
        return 0
    if not args.run_dir:
        ap.error("give RUN_DIR or --sweep FILE")
    return 0 if supervise_queued(Path(args.run_dir), args.interval) != "error" else 1


if __name__ == "__main__":
    sys.exit(main())
