"""The one watch loop of a run, whatever follows it: a child the supervisor started, an orphan it
adopted (``lab.engine.supervise.adopt``) or a Slurm job (``lab.engine.supervise.slurm_watch``).

``RunWatch.watch(source)`` polls the source for its end, turns a ``stop.request`` (or the
supervisor's SIGTERM) into the source's stop, and every ``source.every_s`` looks at the run: the
process tree here (the union of every member seen, recorded in status.json so a stop after the
watcher can still end a straggler), the linked event folders (``lab.engine.supervise.linked``),
one device sample (``lab.engine.supervise.sampler``, for a run whose processes are this machine's:
a Slurm job's nodes sample themselves) and the health watch's tick (``lab.engine.health.watch``).
``finish`` records a run's end from its exit code with the end-of-run diagnosis
(``lab.engine.supervise.diagnose``, a health finding where it explains more); ``record_end`` is the
part every source shares. A source is ``Here`` (this machine's process: a ``spawn.Process``) or
the Slurm job's own; the loop never asks which it has.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Protocol

from lab.engine import procs, spawn
from lab.engine.health.watch import HealthWatch
from lab.engine.spec.diagnosis import Diagnosis
from lab.engine.supervise.diagnose import GENERIC, diagnose
from lab.engine.supervise.linked import EventLinker
from lab.engine.supervise.status import Status
from lab.runfolder import (
    FAILED,
    STOP_REQUEST,
    STOPPED,
    SUCCEEDED,
    now_iso,
    read_json,
)
from lab.runrecords import read_run

log = logging.getLogger(__name__)

TICK_S = 0.2  # how fast a stop request is noticed; each wake-up costs the trainer a little CPU
_INTERFERENCE_EVERY = 5  # samples between interference records in status.json (each is a rewrite)


class Flags:
    stop_all = False  # set by the supervisor's SIGTERM: stop the current run and cancel the rest


def stop_request(run_dir: Path) -> dict | None:
    """The stop asked of the run (``stop.request``'s grace, or the supervisor's SIGTERM); None."""
    req = run_dir / STOP_REQUEST
    if Flags.stop_all:
        return {"grace_s": 5.0}
    if req.exists():
        return read_json(req) or {"grace_s": 5.0}
    return None


class Source(Protocol):
    """What the loop follows. ``here``: its processes are this machine's (their tree is recorded,
    their pids filter the linked events, the device sampler reads them); ``every_s``: how often
    the loop looks at it (None: the sample interval)."""

    here: bool
    every_s: float | None

    def poll(self) -> Any:
        """None while the run goes on; its end (for the source's owner to record) once over."""

    def members(self, known: list[list[float]]) -> list[list[float]]:
        """Every process to end on a stop: ``known`` (the members seen) and those of now."""

    def stop(self, grace_s: float, members: list[list[float]]) -> Any:
        """Ask the run to end: its end when that is already known, else None (polled on)."""

    def look(self) -> tuple[int, list[procs.Process], bool | None] | None:
        """(root pid here, its tree, alive as the health watch should read it) now; None: nothing
        to look at yet (a job still waiting)."""


class Here:
    """A process of this machine as the loop follows it: the child the supervisor started, or an
    adopted orphan's training root (``spawn.Process``); its end is its exit code."""

    here, every_s = True, None

    def __init__(self, proc: spawn.Process, pid_ct: float | None = None) -> None:
        self.proc, self.pid, self.pid_ct = proc, proc.pid, pid_ct

    def poll(self) -> int | None:
        return self.proc.poll()

    def look(self) -> tuple[int, list[procs.Process], bool | None]:
        return self.pid, procs.tree(self.pid), None

    def members(self, known: list[list[float]]) -> list[list[float]]:
        by_pid = {int(p): ct for p, ct in known + procs.identities(procs.tree(self.pid))}
        by_pid.setdefault(self.pid, self.pid_ct)
        return [[p, ct] for p, ct in sorted(by_pid.items())]

    def stop(self, grace_s: float, members: list[list[float]]) -> int:
        """SIGTERM to the groups, SIGKILL after the grace, stragglers by the recorded tree."""
        log.info("stopping pid %s (grace %.1f s)", self.pid, grace_s)
        procs.end_tree(members, [self.pid], grace_s)
        try:
            return self.proc.wait(timeout=5)
        except spawn.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


class RunWatch:
    """One run folder's watch: status.json, its linked events, health and device samples."""

    def __init__(
        self, run_dir: Path, interval_s: float, on_tick: Callable[[], None] | None = None
    ) -> None:
        self.run_dir = run_dir
        self.interval_s = interval_s
        self.on_tick = on_tick or (lambda: None)
        self.run = read_run(run_dir).data  # a dict: the linker and health watch read its keys
        self.status = Status(run_dir)
        self.me = [os.getpid(), procs.create_time(os.getpid())]
        self.linker = EventLinker(self.run, run_dir)  # events_dirs: where the run's curves are
        self.health = HealthWatch(
            run_dir, self.run, self.status.update, self.status.data.get("health")
        )
        self.sampler = None
        self._wrapped = False

    def start_sampler(self) -> None:
        """The device sampler of the run's GPUs (none when it cannot start: the run goes on)."""
        gpus = tuple((self.run.get("config") or {}).get("gpus") or ())
        try:
            from lab.engine.supervise.sampler import SysSampler

            self.sampler = SysSampler(self.run_dir, gpus)
        except Exception as e:  # the run goes on without sys/ events rather than not at all
            log.warning("no device sampling for this run: %s", e)

    def close_sampler(self) -> None:
        if self.sampler is not None:
            self.sampler.close()

    def watch(self, source: Source) -> tuple[Any, dict | None]:
        """The one loop: poll ``source``, look at it every interval, stop it on a request; return
        (its end, the stop request or None)."""
        next_look = 0.0
        known: list[list[float]] = []
        req: dict | None = None
        while True:
            end = source.poll()
            if end is not None:
                return end, req
            if req is None and (req := stop_request(self.run_dir)) is not None:
                known = source.members(known)  # recorded first: a stop cut short still has them
                self.status.update(stopping=True, **({"tree": known} if source.here else {}))
                end = source.stop(float(req.get("grace_s", 5.0)), known)
                if end is not None:
                    return end, req
            if time.monotonic() >= next_look:
                next_look = time.monotonic() + (source.every_s or self.interval_s)
                self._look(source, known)
            self.on_tick()
            time.sleep(TICK_S)

    def _look(self, source: Source, known: list[list[float]]) -> None:
        seen = source.look()
        if source.here and seen is not None:
            # the union of every member seen: a straggler may outlive its parent
            have = {p for p, _ in known}
            new = [i for i in procs.identities(seen[1]) if i[0] not in have]
            if new:
                known[:] = sorted(known + new)
                self.status.update(tree=known)
            self.linker.note(p for p, _ in known)
        if self.linker.scan():
            self.status.update(events_dirs=self.linker.dirs)
        if seen is None:
            return
        pid, tree, alive = seen
        values = self._sample(tree) if source.here else {}
        self.health.tick(pid, tree, values, self.linker.dirs, alive=alive)

    def _sample(self, tree: list[procs.Process]) -> dict[str, float]:
        if self.sampler is None:
            return {}
        try:
            values = self.sampler.sample(tree)
            if self.sampler.step % _INTERFERENCE_EVERY == 0:
                self.status.update(
                    interference=self.sampler.interference(),
                    train_processes=self.sampler.train_processes(),
                )
            return values
        except Exception as e:  # a sampling hiccup must never fail the run
            log.warning("sampling failed: %s", e)
            return {}

    def wrap_up(self) -> None:
        """Once, at the end: the events linked once more (a script that ran less than a scan
        interval is linked too) and what the health watch finds in what the ended run left (a NaN
        loss, its restarts)."""
        if not self._wrapped:
            self._wrapped = True
            self.linker.scan(force=True)
            self.health.finish(self.linker.dirs)

    def record_end(self, state: str, diag: Diagnosis | None, **fields) -> None:
        """Write the run's end: its state and diagnosis, after ``wrap_up``."""
        self.wrap_up()
        if self.sampler is not None:  # written with the final state
            self.status.data["interference"] = self.sampler.interference()
            self.status.data["train_processes"] = self.sampler.train_processes()
        self.status.update(
            state=state,
            ended_at=now_iso(),
            stopping=False,
            diagnosis=diag.to_dict() if diag else None,
            events_dirs=self.linker.dirs,
            **fields,
        )

    def finish(self, rc: int, req: dict | None) -> str:
        """Record the end of a run whose processes were this machine's: its state from ``rc`` and
        the stop request ``req``, with the diagnosis of a failure and what the health watch
        found."""
        self.wrap_up()  # before the diagnosis: a NaN loss found in the ended run's events counts
        if req is not None:
            state, diag = STOPPED, None
        elif rc == 0:
            state, diag = SUCCEEDED, None
        else:
            state, diag = FAILED, self._diagnosis(rc)
        self.record_end(state, diag, exit_code=rc, signal=-rc if rc < 0 else None)
        log.info("run %s: %s (exit %s)", self.run_dir.name, state, rc)
        return state

    def _diagnosis(self, rc: int) -> Diagnosis:
        try:
            diag = diagnose(self.run_dir, rc)
        except Exception as e:  # a diagnosis bug must not hide the failure itself
            log.exception("diagnosis failed")
            diag = Diagnosis(
                "unknown", f"the run exited with code {rc}", f"diagnosis failed: {e}", exit_code=rc
            )
        found = self.health.diagnosis()  # a health finding explains more than a generic crash
        if found and (diag is None or diag.key in GENERIC):
            diag = Diagnosis("nan_loss", *found, exit_code=rc)
        return diag
