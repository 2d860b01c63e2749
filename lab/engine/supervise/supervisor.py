"""The supervisor: the one program that watches a run (or a sweep of runs, one after another).

``python -m lab.engine.supervise.supervisor RUN_DIR`` (or ``--sweep FILE``), started detached by
the launcher so a run outlives the dashboard, runs one of the ``WATCHES`` over the run, all of
them the one loop of ``lab.engine.supervise.watch`` over a different source: ``start`` (a local
run: wait for its turn in the runs folder's queue, then start run.json's command as its child in a
new session, output to RUN_DIR/stdout.log, in run.json's ``cwd`` if any, on a fresh port when the
recorded one was taken), ``submit`` (a Slurm run: sbatch its job and follow the job,
``lab.engine.supervise.slurm_watch``), ``follow`` (a Slurm job a watcher that died submitted) and
``adopt`` (an orphan whose supervisor died, ``lab.engine.supervise.adopt``). ``--watch`` names
it; without, the run's backend does (``watch``; requeueing asks its ``rewatch``). The loop keeps
status.json up to date (atomically; a full disk never crashes it; ``kind``, ``events_dirs``,
``resumed_from``), samples devices into RUN_DIR/sys, records what else used the machine
(``interference``), runs the health watch (``lab.engine.health.watch``: ``health``, ``restarts``,
stacks), stops the run on ``stop.request`` or SIGTERM (a local run: SIGTERM to the groups, SIGKILL
after the grace, stragglers by the recorded tree; a job: scancel) and diagnoses a failed end. It
is status.json's writer (docs/contracts.md). It never imports torch."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Callable

from lab.engine import procs, spawn
from lab.engine.queue.idle import wait_idle
from lab.engine.queue.ticket import turn
from lab.engine.spec import backends
from lab.engine.spec.diagnosis import supervisor_failure
from lab.engine.supervise import adopt, slurm_watch
from lab.engine.supervise.attempts import fresh_port, set_aside_attempt
from lab.engine.supervise.diagnose import diagnose
from lab.engine.supervise.status import Status
from lab.engine.supervise.watch import Flags, Here, RunWatch, stop_request
from lab.runfolder import (
    FAILED,
    QUEUED,
    REPO_ROOT,
    RUNNING,
    STARTING,
    STDOUT_LOG,
    STOP_REQUEST,
    STOPPED,
    SUPERVISOR_LOG,
    now_iso,
    read_json,
)
from lab.runrecords import read_run, read_status

log = logging.getLogger("lab.engine.supervise.supervisor")

_PORT_RETRIES = 2


def _start(w: RunWatch, argv: list[str]) -> spawn.Popen:
    env = dict(os.environ)
    env.update({k: str(v) for k, v in (w.run.get("env") or {}).items()})
    # a script's own folder
    child = spawn.start(argv, w.run_dir / STDOUT_LOG, cwd=w.run.get("cwd") or REPO_ROOT, env=env)
    w.status.update(
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


def run_to_end(w: RunWatch) -> str:
    """Start run.json's command (again on another port when the recorded one was taken) and watch
    it to its end."""
    me = dict(supervisor_pid=w.me[0], supervisor_ct=w.me[1])
    if stop_request(w.run_dir) is not None:
        w.status.update(state=STOPPED, ended_at=now_iso(), **me)
        return STOPPED
    w.status.update(
        state=STARTING,
        started_at=now_iso(),
        kind=w.linker.kind,
        events_dirs=w.linker.dirs,
        resumed_from=w.run.get("resumed_from"),
        **me,
    )
    argv = list(w.run.get("argv") or [])
    try:
        for attempt in range(_PORT_RETRIES + 1):
            argv, port = fresh_port(argv, force=attempt > 0)
            if port:
                w.status.update(port=port)
            started = time.monotonic()
            child = _start(w, argv)
            if w.sampler is None:
                w.start_sampler()  # after the start: tensorboard takes ~0.5 s to import
            rc, req = w.watch(Here(child, w.status.data.get("pid_ct")))
            if (
                req is None
                and rc != 0
                and attempt < _PORT_RETRIES
                and port
                and time.monotonic() - started < 60
            ):
                d = diagnose(w.run_dir, rc)
                if d is not None and d.key == "port_in_use":
                    log.warning("port %s was taken; retrying on another", port)
                    set_aside_attempt(w.run_dir, attempt)
                    continue
            break
        return w.finish(rc, req)
    finally:
        w.close_sampler()


def supervise(run_dir: Path, interval_s: float, on_tick=None) -> str:
    """Run one run to its end; a supervisor error is recorded as the run's failure, never left
    "running"."""
    w = RunWatch(run_dir, interval_s, on_tick)
    try:
        return run_to_end(w)
    except Exception as e:
        log.exception("supervisor failed")
        procs.end_recorded(w.status.data, 2.0)
        log_path = run_dir / SUPERVISOR_LOG
        where = log_path if log_path.exists() else "the sweep log under .sweeps/"
        w.status.update(
            state=FAILED,
            ended_at=now_iso(),
            diagnosis=supervisor_failure(f"the supervisor failed: {e}", f"see {where}").to_dict(),
        )
        return "error"


def _mark(run_dir: Path, **kw) -> None:
    Status(run_dir).update(**kw)


def _gpus(run_dirs: list[Path]) -> list[int]:
    return sorted({int(g) for d in run_dirs for g in read_run(d).gpus})


def supervise_queued(run_dir: Path, interval_s: float) -> str:
    """Wait for the run's turn in the runs folder's queue (``lab.engine.queue``), then run it."""
    me = [os.getpid(), procs.create_time(os.getpid())]
    run = read_run(run_dir)
    exclusive = run.exclusive

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
        lambda: stop_request(run_dir) is not None,
    ):
        if run.wait_for_idle:  # its turn came; now until foreign work is gone too
            wait_idle(
                _gpus([run_dir]),
                lambda why: mark({"position": 0, "waiting_for": [why]}),
                lambda: stop_request(run_dir) is not None,
            )
        return supervise(run_dir, interval_s)  # a cancelled wait: it records the run stopped


def run_sweep(sweep_file: Path, interval_s: float) -> None:
    sweep = read_json(sweep_file) or {}
    root = Path(sweep.get("runs_dir") or sweep_file.parent.parent)
    run_dirs = [root / r for r in sweep.get("run_ids") or []]
    me = [os.getpid(), procs.create_time(os.getpid())]

    def queued(d: Path) -> bool:
        st = read_status(d)
        return not st.data or st.state == QUEUED  # no status.json yet: queued

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
        lambda: Flags.stop_all or all((d / STOP_REQUEST).exists() for d in run_dirs if queued(d)),
    ):
        _run_sweep_runs(run_dirs, interval_s, queued, cancel_requested)


def _run_sweep_runs(run_dirs: list[Path], interval_s: float, queued, cancel_requested) -> None:
    for d in (d for d in run_dirs if queued(d)):
        if Flags.stop_all:
            _mark(d, state=STOPPED, ended_at=now_iso())
        else:
            supervise(d, interval_s, on_tick=cancel_requested)


# each watch: (run folder, sample interval) -> the run's end ("error": the watcher failed)
WATCHES: dict[str, Callable[[Path, float], str]] = {
    "start": supervise_queued,  # a local run: its turn, then its command as the child
    "submit": slurm_watch.submit_and_follow,  # a Slurm run: sbatch, then follow the job
    "follow": slurm_watch.follow_submitted,  # a Slurm job a watcher that died submitted
    "adopt": adopt.watch_adopted,  # an orphan: a run whose supervisor died while it lives
}


def _on_sigterm(signum, frame) -> None:
    Flags.stop_all = True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m lab.engine.supervise.supervisor", description=__doc__.splitlines()[0]
    )
    ap.add_argument("run_dir", nargs="?", help="the run folder to supervise")
    ap.add_argument(
        "--sweep", help="a sweep file (runs/.sweeps/<id>.json): run its runs one after another"
    )
    ap.add_argument(
        "--watch",
        choices=sorted(WATCHES),
        help="which watch to run over RUN_DIR (default: its backend's, from run.json)",
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
    run_dir = Path(args.run_dir)
    name = args.watch or backends.of(read_run(run_dir).config or {}).watch
    return 0 if WATCHES[name](run_dir, args.interval) != "error" else 1


if __name__ == "__main__":
    sys.exit(main())
