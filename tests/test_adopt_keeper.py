"""The dashboard's adoption of orphaned runs (lab/engine/supervise/adopt.py ``keep_adopting``):
the Home page starts no process while it draws, and the dashboard still adopts, from a thread of
its own, every interval. In-process: the orphan is this test process itself (a run that says
running, with its supervisor's identity wrong, so gone), and ``spawn.start`` only records."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from streamlit.testing.v1 import AppTest

from lab.engine import procs, spawn
from lab.engine.supervise import adopt
from lab.runfolder import RUN_JSON, STATUS_JSON, read_json, write_json_atomic

REPO = Path(__file__).resolve().parent.parent


def _orphan(root: Path) -> Path:
    """A run whose supervisor is gone while its training root (this process) lives."""
    d = root / "orphan"
    d.mkdir()
    me = os.getpid()
    write_json_atomic(d / RUN_JSON, {"run_id": d.name, "config": {}})
    write_json_atomic(
        d / STATUS_JSON,
        {
            "state": "running",
            "pid": me,
            "pid_ct": procs.create_time(me),
            "supervisor_pid": me,
            "supervisor_ct": 1.0,  # another process's identity: that supervisor is gone
        },
    )
    assert adopt.orphaned(read_json(d / STATUS_JSON))
    return d


def _recording(monkeypatch) -> list[list[str]]:
    started: list[list[str]] = []

    class Ended:  # a watcher that has already ended
        def poll(self) -> int:
            return 0

    def start(argv, log_path, **kw):
        started.append(list(argv))  # and nothing started
        return Ended()

    monkeypatch.setattr(spawn, "start", start)
    return started


def test_drawing_home_twice_starts_no_process(runs_dir, cpu_only, monkeypatch):
    orphan = _orphan(runs_dir)
    started = _recording(monkeypatch)
    monkeypatch.setattr(adopt, "ADOPT_EVERY_S", 3600.0)  # the dashboard's thread: not in this test
    try:
        at = AppTest.from_file(str(REPO / "app.py"), default_timeout=30)  # Home, as users see it
        at.run()
        at.run()
        assert at.title[0].value == "Parallel Training Lab"
        assert not at.exception, at.exception
        assert started == []  # no watcher started by a render
        assert read_json(orphan / STATUS_JSON)["supervisor_ct"] == 1.0
        assert runs_dir in adopt._keepers  # the dashboard's own look is set up, once
    finally:
        keeper = adopt._keepers.pop(runs_dir, None)
        if keeper is not None:
            keeper[1].set()


def test_the_dashboards_thread_adopts_every_interval_and_once_per_folder(runs_dir, monkeypatch):
    _orphan(runs_dir)
    started = _recording(monkeypatch)
    looked = threading.Semaphore(0)
    real = adopt.adopt_orphans

    def counting(root):
        looked.release()
        return real(root)

    monkeypatch.setattr(adopt, "adopt_orphans", counting)
    done = adopt.keep_adopting(runs_dir, every_s=0.05)
    try:
        assert adopt.keep_adopting(runs_dir, every_s=0.05) is done  # one thread per folder
        assert looked.acquire(timeout=10) and looked.acquire(timeout=10)  # again and again
        # it found the orphan and would start its watcher (the supervisor's adopt watch)
        assert [a[-3:] for a in started][:1] == [[str(runs_dir / "orphan"), "--watch", "adopt"]]
    finally:
        done.set()
        adopt._keepers.pop(runs_dir)[0].join(5)
