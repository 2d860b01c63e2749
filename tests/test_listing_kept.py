"""Listing the runs folder is incremental: a second listing of unchanged runs reads no file, and a
file that changed (replaced, or edited in place) is read again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab import runfolder
from lab.engine import registry

OLD = time.time() - 3600  # settled: changed long before the listing


def _run(root: Path, rid: str, state: str = "succeeded") -> Path:
    d = root / rid
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"config": {"mode": "ddp"}, "created_at": rid}))
    (d / "status.json").write_text(json.dumps({"state": state, "exit_code": 0}))
    (d / "summary.json").write_text(json.dumps({"completed": True, "mode": "ddp"}))
    for f in d.iterdir():
        os.utime(f, (OLD, OLD))
    return d


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    seen: list[str] = []
    real = runfolder.read_json

    def counting(path):
        seen.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(runfolder, "read_json", counting)
    return seen


def test_a_second_listing_of_unchanged_runs_reads_nothing(tmp_path, reads):
    for i in range(30):
        _run(tmp_path, f"20260101-0000{i:02d}-ddp-a")
    first = registry.list_runs(tmp_path)
    assert len(first) == 30 and reads  # the first listing reads every file
    reads.clear()
    again = registry.list_runs(tmp_path)
    assert reads == [] and again == first


def test_a_replaced_or_edited_file_is_read_again(tmp_path, reads):
    d = _run(tmp_path, "20260101-000000-ddp-a")
    assert registry.list_runs(tmp_path)[0].state == "succeeded"
    runfolder.write_json_atomic(d / "status.json", {"state": "failed", "exit_code": 1})
    reads.clear()
    assert registry.list_runs(tmp_path)[0].state == "failed"  # just written: never from memory
    assert "status.json" in reads
    os.utime(d / "status.json", (OLD, OLD))
    registry.list_runs(tmp_path)
    with open(d / "status.json", "r+") as f:  # in place, same size: the mtime tells
        text = f.read().replace("failed", "stoppd")
        f.seek(0)
        f.write(text)
    os.utime(d / "status.json", (OLD + 60, OLD + 60))
    assert registry.list_runs(tmp_path)[0].state == "stoppd"
    (d / "summary.json").write_text("{trunc")  # damaged in place
    os.utime(d / "summary.json", (OLD + 90, OLD + 90))
    rec = registry.list_runs(tmp_path)[0]
    assert rec.state == "unreadable" and rec.unreadable == ["summary.json"]


@pytest.mark.proc
def test_a_live_run_is_reconciled_on_every_listing(tmp_path):
    sup = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        d = _run(tmp_path, "20260101-000000-ddp-a", state="running")
        runfolder.write_json_atomic(
            d / "status.json", {"state": "running", "supervisor_pid": sup.pid}
        )
        os.utime(d / "status.json", (OLD, OLD))
        assert registry.list_runs(tmp_path)[0].state == "running"
        sup.kill()
        sup.wait()
        # no file changed, but the supervisor is gone: the listing says so
        assert registry.list_runs(tmp_path)[0].state == "lost"
    finally:
        sup.kill()
        sup.wait()
