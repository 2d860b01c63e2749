"""lab/engine/registry.py and lab/engine/logs.py on hand-made run folders (no training needed)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psutil
import pytest

from lab.engine import logs, registry
from lab.runfolder import BadRunId, now_iso, write_json_atomic


def _run(root, run_id, status=None, **extra):
    d = root / run_id
    d.mkdir()
    write_json_atomic(
        d / "run.json",
        {
            "run_id": run_id,
            "name": run_id,
            "config": {"mode": "ddp"},
            "created_at": extra.pop("created_at", "2026-11-29T07:00:00+00:00"),
            "sweep_id": None,
        },
    )
    if status is not None:
        write_json_atomic(d / "status.json", status)
    for name, data in extra.items():
        (d / f"{name}.json").write_text(data if isinstance(data, str) else json.dumps(data))
    return d


def test_records_carry_progress_and_summary_and_skip_hidden(runs_dir):
    _run(
        runs_dir,
        "a",
        {"state": "succeeded", "exit_code": 0},
        progress={"step": 5},
        summary={"steps": 5},
        created_at="2026-11-29T07:00:01+00:00",
    )
    _run(runs_dir, "b", {"state": "failed", "exit_code": 1, "diagnosis": {"key": "cuda_oom"}})
    (runs_dir / ".sweeps").mkdir()
    (runs_dir / "not-a-run").mkdir()
    recs = registry.list_runs()  # default root: LAB_RUNS_DIR
    assert [r.run_id for r in recs] == ["a", "b"]  # newest first
    a, b = recs
    assert (a.state, a.mode, a.progress, a.summary, a.exit_code) == (
        "succeeded",
        "ddp",
        {"step": 5},
        {"steps": 5},
        0,
    )
    assert b.diagnosis == {"key": "cuda_oom"} and b.to_json()["run_id"] == "b"


def test_half_written_files_are_absent_and_the_run_unreadable(runs_dir):
    # our writers replace files atomically, so a torn file is damaged (issue 24): its figures are
    # absent and the run is listed ``unreadable`` naming the files
    _run(runs_dir, "torn", {"state": "succeeded"}, progress='{"step": 1', summary="[1, 2]")
    (runs_dir / "torn2").mkdir()
    (runs_dir / "torn2" / "status.json").write_text('{"state": "runn')
    t = time.monotonic()
    recs = {r.run_id: r for r in registry.list_runs(runs_dir)}
    assert time.monotonic() - t < 2
    assert recs["torn"].progress is None and recs["torn"].summary is None
    assert recs["torn"].state == "unreadable"
    assert recs["torn"].unreadable == ["summary.json", "progress.json"]
    assert recs["torn2"].state == "unreadable" and recs["torn2"].unreadable == ["status.json"]


@pytest.mark.proc
def test_dead_or_reused_supervisor_pid_means_lost(runs_dir):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    me = psutil.Process()
    _run(runs_dir, "dead", {"state": "running", "supervisor_pid": dead.pid, "supervisor_ct": 1.0})
    # our own pid with another create time: the pid was reused by an unrelated process
    _run(
        runs_dir,
        "reused",
        {"state": "starting", "supervisor_pid": me.pid, "supervisor_ct": me.create_time() - 100},
    )
    _run(
        runs_dir,
        "live",
        {"state": "running", "supervisor_pid": me.pid, "supervisor_ct": me.create_time()},
    )
    _run(
        runs_dir,
        "sweep-queued",
        {"state": "queued", "supervisor_pid": dead.pid, "supervisor_ct": 1.0},
    )
    on_disk = {p.name: (p / "status.json").read_bytes() for p in runs_dir.iterdir()}
    mtimes = {p.name: (p / "status.json").stat().st_mtime_ns for p in runs_dir.iterdir()}
    states = {r.run_id: r.state for r in registry.list_runs(runs_dir)}
    assert states == {"dead": "lost", "reused": "lost", "live": "running", "sweep-queued": "lost"}
    assert registry.get_run("dead", runs_dir).state == "lost"
    # a listing is a read: status.json stays as the supervisor left it, lost is computed each time
    assert {p.name: (p / "status.json").read_bytes() for p in runs_dir.iterdir()} == on_disk
    assert {p.name: (p / "status.json").stat().st_mtime_ns for p in runs_dir.iterdir()} == mtimes
    assert json.loads((runs_dir / "dead" / "status.json").read_text())["state"] == "running"
    assert registry.status(runs_dir / "dead")["state"] == "lost"


def test_get_and_delete(runs_dir):
    me = psutil.Process()
    _run(runs_dir, "done", {"state": "succeeded"})
    _run(
        runs_dir,
        "live",
        {"state": "running", "supervisor_pid": me.pid, "supervisor_ct": me.create_time()},
    )
    with pytest.raises(registry.RunNotFound):
        registry.get_run("nope", runs_dir)
    with pytest.raises(BadRunId):
        registry.delete_run("../etc", runs_dir)
    with pytest.raises(registry.RunIsLive, match="stop it first"):
        registry.delete_run("live", runs_dir)
    registry.delete_run("done", runs_dir)
    assert not (runs_dir / "done").exists() and (runs_dir / "live").exists()


def test_logs_tail_ranks_and_follow(runs_dir):
    d = _run(runs_dir, "r", {"state": "running"})
    lines = [f"[default{i % 2}]:line {i}" for i in range(1000)]
    (d / "stdout.log").write_text("\n".join(lines) + "\n")
    for rank in (0, 1):
        rd = d / "logs" / "job_x" / "attempt_0" / str(rank)
        rd.mkdir(parents=True)
        (rd / "stdout.log").write_text(f"out {rank}\n")
        (rd / "stderr.log").write_text(f"err {rank}\n")
    assert logs.ranks(d) == [0, 1]
    assert logs.tail(d, 2) == "[default0]:line 998\n[default1]:line 999"
    assert logs.tail(d, 2, rank=1) == "line 997\nline 999"
    (d / "stdout.log").write_text("plain\n")  # no prefixed lines: the rank's own files
    assert logs.tail(d, 5, rank=0) == "out 0\nerr 0"
    write_json_atomic(d / "status.json", {"state": "succeeded"})
    assert list(logs.follow(d, start_lines=5)) == ["plain"]
    assert logs.tail(runs_dir / "missing", 5) == ""


def test_folder_states_without_a_status_file(runs_dir):
    _run(runs_dir, "just-created", None, created_at=now_iso())
    _run(runs_dir, "abandoned", None, created_at="2026-11-29T07:00:00+00:00")
    # python -m training.train --log-dir by-hand: only the trainer's files
    (runs_dir / "by-hand").mkdir()
    (runs_dir / "by-hand" / "summary.json").write_text(
        json.dumps({"completed": True, "mode": "dp", "config": {"mode": "dp"}})
    )
    states = {r.run_id: (r.state, r.mode) for r in registry.list_runs(runs_dir)}
    assert states == {
        "just-created": ("queued", "ddp"),
        "abandoned": ("lost", "ddp"),
        "by-hand": ("succeeded", "dp"),
    }
    # nothing written by the listing
    assert not any((runs_dir / r / "status.json").exists() for r in states)


@pytest.mark.proc
def test_process_owner_walks_ancestry_to_a_recorded_pid(runs_dir):
    """A real child of this process belongs to the run that recorded this process; strangers to
    none."""
    me = psutil.Process()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        _run(
            runs_dir,
            "mine",
            {"state": "running", "supervisor_pid": me.pid, "supervisor_ct": me.create_time()},
        )
        _run(runs_dir, "ended", {"state": "succeeded", "pid": 1})  # an ended run owns nothing
        (runs_dir / ".sweeps").mkdir()
        assert registry.run_pids(runs_dir) == {me.pid: "mine"}
        owner = registry.process_owner(runs_dir)
        assert owner(child.pid) == "mine" and owner(me.pid) == "mine"
        assert owner(1) is None  # init: an ancestor of everything, recorded by no live run
        assert owner(4_000_000) is None  # above pid_max: vanished before we asked
    finally:
        child.kill()
        child.wait()


@pytest.mark.proc
def test_follow_ends_when_the_supervisor_is_gone(runs_dir):
    """A run that says running but whose supervisor died is over (lost) for ``logs --follow``
    too."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    d = _run(
        runs_dir, "orphan", {"state": "running", "supervisor_pid": dead.pid, "supervisor_ct": 1.0}
    )
    (d / "stdout.log").write_text("last words\n")
    t = time.monotonic()
    assert list(logs.follow(d, poll_s=0.05)) == ["last words"]
    assert time.monotonic() - t < 5


def test_rank_dirs_latest_attempt_wins(tmp_path):
    for attempt in (0, 2, 10):  # attempt_10 sorts before attempt_2 as text: numbers decide
        for rank in (0, 1):
            (tmp_path / "logs" / "job" / f"attempt_{attempt}" / str(rank)).mkdir(parents=True)
    (tmp_path / "logs" / "job" / "attempt_10" / "notarank").mkdir()
    dirs = logs.rank_dirs(tmp_path)
    assert sorted(dirs) == [0, 1] and all(d.parent.name == "attempt_10" for d in dirs.values())
    assert logs.rank_dirs(tmp_path / "missing") == {}
