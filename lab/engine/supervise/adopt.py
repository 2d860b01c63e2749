"""A watcher that comes back: adopting a run whose supervisor died while its processes live.

The OOM killer's SIGKILL to a run's supervisor leaves its training processes
running with nobody sampling devices, watching health or recording the end.
``adopt_orphans(root)`` is called by every ``python -m lab`` command and by the
Home page: for each run whose status.json says starting/running, whose
supervisor is gone and whose training root process (``pid``/``pid_ct``) still
lives, it starts ``python -m lab.engine.supervise.adopt RUN_DIR`` detached. That
watcher takes an exclusive lock on ``RUN_DIR/adopt.lock`` (a second one exits),
checks again, writes itself as the supervisor with ``watcher: {"pid",
"adopted_at"}`` and ``state: running``, and runs the supervisor's own watch loop
(device samples into ``sys/``, health, the process tree, stop requests). A
process that is not its child cannot be waited for, so the end is read from the
trainer's records: ``succeeded`` when summary.json says ``completed``, else
``failed`` with the usual diagnosis (error.json, the logs); ``exit_code`` stays
null. Runs whose processes are gone stay ``lost``.
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import sys
import time
from pathlib import Path

from lab.engine import procs, spawn
from lab.engine.queue import book
from lab.engine.spec import sweep as sweep_record
from lab.engine.supervise.status import Status
from lab.engine.supervise.supervisor import RunSupervisor
from lab.runfolder import (
    ADOPT_LOCK,
    ADOPT_LOG,
    HAS_PROCESSES,
    QUEUED,
    REPO_ROOT,
    RUN_JSON,
    RUNNING,
    STATUS_JSON,
    STOP_REQUEST,
    SUMMARY_JSON,
    SUPERVISOR_LOG,
    now_iso,
    read_json,
    root_or_default,
)

log = logging.getLogger("lab.engine.supervise.adopt")
_MODULE = "lab.engine.supervise.adopt"
SUPERVISOR = "lab.engine.supervise.supervisor"


def orphaned(st: dict) -> bool:
    """Does this status.json describe a run whose supervisor is gone but whose processes live?"""
    return (
        st.get("state") in HAS_PROCESSES
        and bool(st.get("pid"))
        and not procs.alive(st.get("supervisor_pid"), st.get("supervisor_ct"))
        and procs.alive(st.get("pid"), st.get("pid_ct"))
    )


def waiting_orphan(run_dir: Path, st: dict) -> bool:
    """Does this status.json describe a run waiting its turn whose supervisor died (and that
    nobody asked to stop)?"""
    return (
        st.get("state") == QUEUED
        and bool(st.get("supervisor_pid"))
        and not procs.alive(st.get("supervisor_pid"), st.get("supervisor_ct"))
        and not (run_dir / STOP_REQUEST).exists()
    )


def _detached(argv: list[str], log_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    spawn.start([sys.executable, "-m", *argv], log_path, cwd=REPO_ROOT, env=env)


def _run_dirs(root: Path) -> list[Path]:
    try:
        return sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    except OSError:
        return []


def adopt_orphans(root: Path | str | None = None) -> list[str]:
    """Start a watcher for every orphaned run under ``root``, and a new supervisor for every
    waiting run whose supervisor died (``requeue_orphans``); the run ids it did either for."""
    root = root_or_default(root)
    started, waiting = [], []
    for d in _run_dirs(root):  # each status.json read once per command
        st = read_json(d / STATUS_JSON) or {}
        if orphaned(st):
            _detached([_MODULE, str(d)], d / ADOPT_LOG)
            started.append(d.name)
        elif waiting_orphan(d, st):
            waiting.append(d)
    return started + requeue_orphans(root, waiting)


def requeue_orphans(root: Path, candidates: list[Path] | None = None) -> list[str]:
    """A waiting run whose supervisor died gets a new one, which joins the queue again at its end
    (and waits there behind whatever still runs): a sweep's waiting runs one sweep supervisor for
    the rest of the sweep, any other run its own. ``candidates``: the run folders seen so (all of
    ``root``'s are read when not given); each is checked again and marked under the queue's lock,
    so two commands at once requeue a run once."""
    found: dict[tuple[str, ...], list[str]] = {}  # the new supervisor's arguments -> its runs
    logs: dict[tuple[str, ...], Path] = {}
    if candidates is None:
        candidates = [
            d for d in _run_dirs(root) if waiting_orphan(d, read_json(d / STATUS_JSON) or {})
        ]
    if not candidates:
        return []  # the usual case: no lock taken, nothing written
    with book.editing(root):
        for d in candidates:
            if not waiting_orphan(d, read_json(d / STATUS_JSON) or {}):
                continue
            sweep_id = (read_json(d / RUN_JSON) or {}).get("sweep_id")
            sweep = sweep_record.path(root, sweep_id) if sweep_id else None
            if sweep is not None and sweep.is_file():
                key, logs[key] = ("--sweep", str(sweep)), sweep.with_suffix(".log")
            else:
                key, logs[key] = (str(d),), d / SUPERVISOR_LOG
            found.setdefault(key, []).append(d.name)
            # no dead supervisor on it any more: the next command does not requeue it again
            Status(d).update(supervisor_pid=None, supervisor_ct=None, queue=None, requeued=True)
    for key, runs in found.items():
        _detached([SUPERVISOR, *key], logs[key])
        log.info("requeued %s", ", ".join(runs))
    return [r for runs in found.values() for r in runs]


class _Orphan:
    """The run's training root as ``RunSupervisor.watch`` follows a child: not ours, so
    its exit code is unknown; ``poll`` says 0 once it is gone (the end is read from files)."""

    def __init__(self, pid: int, ct: float | None) -> None:
        self.pid, self.ct = int(pid), ct

    def poll(self) -> int | None:
        return None if procs.alive(self.pid, self.ct) else 0

    def wait(self, timeout: float | None = None) -> int:
        procs.wait_until(lambda: self.poll() is not None, timeout or 5.0)
        return 0

    def kill(self) -> None:
        procs.end_tree([[self.pid, self.ct]], [self.pid], 0.0)


def watch_adopted(run_dir: Path, interval_s: float) -> str:
    """Adopt ``run_dir``'s run and watch it to its end; "" when another watcher has it or it
    needs none."""
    lock = open(run_dir / ADOPT_LOCK, "a")  # held for this process's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return ""
    st = read_json(run_dir / STATUS_JSON) or {}
    if not orphaned(st):
        return ""
    sup = RunSupervisor(run_dir, interval_s)
    me = sup.me
    sup.status.update(
        state=RUNNING,
        supervisor_pid=me[0],
        supervisor_ct=me[1],
        watcher={"pid": me[0], "adopted_at": now_iso()},
    )
    log.info("adopted run %s (pid %s)", run_dir.name, st["pid"])
    child = _Orphan(st["pid"], st.get("pid_ct"))
    sampler = sup.sampler()
    try:
        _rc, req = sup.watch(child, sampler)
    finally:
        if sampler is not None:
            sampler.close()
    if req is None:  # its end, from the trainer's own record
        time.sleep(0.5)  # summary.json is written just before the trainer exits
        done = bool((read_json(run_dir / SUMMARY_JSON) or {}).get("completed"))
        rc = 0 if done else 1
    else:
        rc = -15
    state = sup.finish(rc, req)
    sup.status.update(exit_code=None, signal=None)
    return state


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {_MODULE}", description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument(
        "--interval", type=float, default=float(os.environ.get("LAB_SAMPLE_INTERVAL_S", "1.0"))
    )
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    state = watch_adopted(Path(args.run_dir), args.interval)
    log.info("adopted run ended: %s", state or "not adopted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
