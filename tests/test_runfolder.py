"""lab/runfolder.py: the runs root, run ids, time stamps, and torn-safe JSON."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

from lab import runfolder


def test_the_runs_root_is_resolved_in_one_place(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LAB_RUNS_DIR", raising=False)
    # the repository's runs/, wherever the command stands (the installed `lab` from any folder)
    repo_runs = Path(runfolder.__file__).resolve().parent.parent / "runs"
    assert runfolder.runs_dir() == runfolder.root_or_default(None) == repo_runs
    monkeypatch.setenv("LAB_RUNS_DIR", "~/elsewhere")
    assert runfolder.runs_dir() == runfolder.root_or_default("") == Path.home() / "elsewhere"
    # given beats the environment
    assert runfolder.root_or_default("rel") == tmp_path.resolve() / "rel"


@pytest.mark.parametrize("bad", ["../x", "a/b", ".hidden", "", "a..b", "x" * 129, "a b"])
def test_run_ids_that_could_escape_are_refused(bad):
    with pytest.raises(runfolder.BadRunId, match="letters, digits"):
        runfolder.check_run_id(bad)
    assert (
        runfolder.check_run_id("20261129-074500-ddp-tinycnn-1a2b")
        == "20261129-074500-ddp-tinycnn-1a2b"
    )


def test_times_parse_ours_zulu_and_epoch_and_nothing_else():
    now = runfolder.now_iso()
    assert runfolder.parse_time(now).tzinfo is not None and abs(runfolder.age_s(now)) < 5
    assert runfolder.parse_time("2026-11-29T07:45:00Z") == datetime(
        2026, 11, 29, 7, 45, tzinfo=timezone.utc
    )
    assert runfolder.parse_time(0) == datetime(1970, 1, 1, tzinfo=timezone.utc)
    assert [runfolder.parse_time(v) for v in (None, "", True, "soon", 1e20)] == [None] * 5
    assert runfolder.age_s("never") is None and len(runfolder.stamp()) == len("20261129-074500")


def test_json_written_atomically_and_torn_reads_are_none(tmp_path):
    p = tmp_path / runfolder.STATUS_JSON
    runfolder.write_json_atomic(p, {"state": runfolder.RUNNING})
    assert runfolder.read_json(p) == {"state": "running"} and os.listdir(tmp_path) == [
        "status.json"
    ]
    assert oct(p.stat().st_mode & 0o777) == oct(0o644)
    p.write_text(json.dumps({"state": "running"})[:-3])
    assert runfolder.read_json(p) is None and runfolder.read_json(tmp_path / "missing.json") is None
    p.write_text("[1, 2]")
    assert runfolder.read_json(p) is None  # not an object


def test_state_groups():
    assert set(runfolder.LIVE_STATES) | set(runfolder.FINAL_STATES) == set(runfolder.STATES)
    assert (
        runfolder.is_live("queued") and not runfolder.is_live("lost") and runfolder.is_final("lost")
    )
