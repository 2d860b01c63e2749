"""A watcher that comes back: adopting a run whose supervisor died while its processes live.

The OOM killer's SIGKILL to a run's supervisor leaves its training processes
running with nobody sampling devices, watching health or recording the end.
``adopt_orphans(root)`` is called by every ``python -m lab`` command and, every
``ADOPT_EVERY_S`` and never while a page draws, by the dashboard (``keep_adopting``): for each
run whose status.json says starting/running, whose supervisor is gone and whose training root
process (``pid``/``pid_ct``) still lives, it starts the supervisor's ``adopt`` watch
(``python -m lab.engine.supervise.supervisor RUN_DIR --watch adopt``) detached. That
watcher takes an exclusive lock on ``RUN_DIR/adopt.lock`` (a second one exits),
checks again, writes itself as the supervisor with ``watcher: {"pid",
"adopted_at"}`` and ``state: running``, and runs the one watch loop
(``lab.engine.supervise.watch``: device samples into ``sys/``, health, the process
tree, stop requests). A process that is not its child cannot be waited for, so the
end is read from the trainer's records: ``succeeded`` when summary.json says
``completed``, else ``failed`` with the usual diagnosis (error.json, the logs);
``exit_code`` stays null. Runs whose processes are gone stay ``lost``. A waiting run
whose supervisor died is requeued (``requeue_orphans``) with the watch its backend
names (``rewatch``): a local run waits its turn again, a Slurm job already submitted
is followed, never submitted again.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sys
import threading
import time
from pathlib import Path

from lab.engine import procs, spawn
from lab.engine.queue import book
from lab.engine.spec import backends
from lab.engine.spec import sweep as sweep_record
from lab.engine.supervise.status import Status
from lab.engine.supervise.watch import Here, RunWatch
from lab.runfolder import (
    ADOPT_LOCK,
    ADOPT_LOG,
    HAS_PROCESSES,
    QUEUED,
    REPO_ROOT,
    RUNNING,
    STOP_REQUEST,
    SUPERVISOR_LOG,
    now_iso,
    root_or_default,
)
from lab.runrecords import read_run, read_status, read_summary

log = logging.getLogger("lab.engine.supervise.adopt")
SUPERVISOR = backends.SUPERVISOR
ADOPT_EVERY_S = 10.0  # how often the dashboard looks for orphans (keep_adopting)


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


# watchers this process started: polled, so that in a long-lived one (the dashboard's) an ended
# watcher does not linger as a zombie
_started: list[spawn.Popen] = []


def _detached(argv: list[str], log_path: Path) -> None:
    _started[:] = [p for p in _started if p.poll() is None]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    _started.append(spawn.start([sys.executable, "-m", *argv], log_path, cwd=REPO_ROOT, env=env))


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
        st = read_status(d).data
        if orphaned(st):
            _detached([SUPERVISOR, str(d), "--watch", "adopt"], d / ADOPT_LOG)
            started.append(d.name)
        elif waiting_orphan(d, st):
            waiting.append(d)
    return started + requeue_orphans(root, waiting)


def requeue_orphans(root: Path, candidates: list[Path] | None = None) -> list[str]:
    """A waiting run whose supervisor died gets a new one, with the watch the run's backend names
    (``rewatch``): a local run's joins the queue again at its end (and waits there behind whatever
    still runs), a sweep's waiting runs one sweep supervisor for the rest of the sweep, any other
    run its own; a Slurm run's follows the job already submitted. ``candidates``: the run folders
    seen so (all of ``root``'s are read when not given); each is checked again and marked under
    the queue's lock, so two commands at once requeue a run once."""
    found: dict[tuple[str, ...], list[str]] = {}  # the new supervisor's arguments -> its runs
    logs: dict[tuple[str, ...], Path] = {}
    if candidates is None:
        candidates = [d for d in _run_dirs(root) if waiting_orphan(d, read_status(d).data)]
    if not candidates:
        return []  # the usual case: no lock taken, nothing written
    with book.editing(root):
        for d in candidates:
            if not waiting_orphan(d, read_status(d).data):
                continue
            run = read_run(d)
            sweep_id = run.sweep_id
            sweep = sweep_record.path(root, sweep_id) if sweep_id else None
            sweep = sweep if sweep is not None and sweep.is_file() else None
            key = backends.of(run.config or {}).rewatch(d, sweep)
            logs[key] = sweep.with_suffix(".log") if "--sweep" in key else d / SUPERVISOR_LOG
            found.setdefault(key, []).append(d.name)
            # no dead supervisor on it any more: the next command does not requeue it again
            Status(d).update(supervisor_pid=None, supervisor_ct=None, queue=None, requeued=True)
    for key, runs in found.items():
        _detached([SUPERVISOR, *key], logs[key])
        log.info("requeued %s", ", ".join(runs))
    return [r for runs in found.values() for r in runs]


class _Orphan:
    """The run's training root as the one loop follows a child: not ours, so its exit code is
    unknown; ``poll`` says 0 once it is gone (the end is read from files)."""

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
    """The supervisor's ``adopt`` watch: adopt ``run_dir``'s run and watch it to its end; "" when
    another watcher has it or it needs none."""
    lock = open(run_dir / ADOPT_LOCK, "a")  # held for this process's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return ""
    st = read_status(run_dir).data
    if not orphaned(st):
        return ""
    w = RunWatch(run_dir, interval_s)
    w.status.update(
        state=RUNNING,
        supervisor_pid=w.me[0],
        supervisor_ct=w.me[1],
        watcher={"pid": w.me[0], "adopted_at": now_iso()},
    )
    log.info("adopted run %s (pid %s)", run_dir.name, st["pid"])
    w.start_sampler()
    try:
        _rc, req = w.watch(Here(_Orphan(st["pid"], st.get("pid_ct")), st.get("pid_ct")))
    finally:
        w.close_sampler()
    if req is None:  # its end, from the trainer's own record
        time.sleep(0.5)  # summary.json is written just before the trainer exits
        done = read_summary(run_dir).completed
        rc = 0 if done else 1
    else:
        rc = -15
    state = w.finish(rc, req)
    w.status.update(exit_code=None, signal=None)
    log.info("adopted run ended: %s", state or "not adopted")
    return state


_keepers: dict[Path, tuple[threading.Thread, threading.Event]] = {}


def keep_adopting(root: Path | str | None = None, every_s: float | None = None) -> threading.Event:
    """Adopt and requeue ``root``'s orphans every ``every_s`` (``ADOPT_EVERY_S``) from a thread
    of this process, the dashboard's, so that a page never starts a process while it draws; once
    per root, the first look one interval from now. Setting the event it returns ends it."""
    root = root_or_default(root)
    if root in _keepers and _keepers[root][0].is_alive():
        return _keepers[root][1]
    every = ADOPT_EVERY_S if every_s is None else every_s
    done = threading.Event()

    def keep() -> None:
        while not done.wait(every):
            try:
                adopt_orphans(root)
            except Exception as e:  # never the dashboard's end: the next look tries again
                log.warning("could not adopt orphaned runs: %s", e)

    thread = threading.Thread(target=keep, name=f"adopt {root}", daemon=True)
    _keepers[root] = (thread, done)
    thread.start()
    return done
