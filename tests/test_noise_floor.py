"""This machine's noise floor: ``python -m lab noise``, its record and the margin Compare takes.

Real runs: ``noise --runs 3`` of a tiny config writes exactly the contract's keys, its spread and
margin follow the documented rule from the recorded throughputs, and ``latest_margin`` finds it
for this host and one device (none for two). ``--runs 2`` is one line naming the fix and starts
nothing. Home's button starts the measurement in the background (its sweep queued; stopped here).
The record's arithmetic and the choice of the newest record are checked as values.
"""
# These tests start real processes (the ``proc`` kind of test).

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import pytest

from lab.engine.noise import record
from lab.engine.noise.record import Margin, latest_margin
from lab.runfolder import REPO_ROOT
from tests.helpers.cli import run_lab

TINY = ["--max-steps", "12", "--epochs", "1", "--log-every", "2", "--checkpoint", "none"]
TINY += ["--image-size", "16", "--batch-size", "32"]
KEYS = {"config", "runs", "throughputs", "spread_pct", "margin_pct"}


def _lab(runs_dir: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_lab(runs_dir, *args, timeout=timeout, CUDA_VISIBLE_DEVICES="")


def test_spread_and_margin_rule():
    assert record.spread_pct([90.0, 100.0, 110.0]) == pytest.approx(20.0)
    assert record.margin_pct(20.0) == 10.0  # half the spread
    assert record.margin_pct(4.0) == record.MARGIN_FLOOR_PCT == 5.0  # never below 5%
    with pytest.raises(ValueError):
        record.make({}, ["a", "b"], [1.0, 2.0], 1)


def test_latest_margin_is_the_newest_for_the_host_and_device_count(tmp_path):
    assert latest_margin(tmp_path, "h", 1) is None
    old = dict(record.make({}, ["a", "b", "c"], [100, 100, 100], 1), host="h", id="old")
    new = dict(record.make({}, ["a", "b", "c"], [80, 100, 120], 1), host="h", id="new")
    other = dict(record.make({}, ["a", "b", "c"], [50, 100, 150], 2), host="h", id="two")
    old["created_at"], new["created_at"], other["created_at"] = "2026-01-01", "2026-01-02", "2027"
    for r in (new, old, other):
        record.write(tmp_path, r)
    assert latest_margin(tmp_path, "h", 1) == Margin(
        20.0, "measured on host h, 1 device, noise new (3 runs)"
    )
    assert latest_margin(tmp_path, "h", 2).pct == 50.0
    assert latest_margin(tmp_path, "elsewhere", 1) is None
    assert record.latest(tmp_path)["id"] == "two"


@pytest.mark.proc
def test_fewer_than_three_runs_is_one_line_and_starts_nothing(tmp_path):
    r = _lab(tmp_path / "runs", "noise", "--runs", "2", timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "error: --runs 2: give 3 or more runs (the spread of fewer says nothing), e.g. --runs 5"
    ]
    assert not (tmp_path / "runs").exists()


@pytest.mark.proc
def test_noise_records_three_runs(tmp_path):
    runs_dir = tmp_path / "runs"
    r = _lab(runs_dir, "noise", "--runs", "3", *TINY, "--json")
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    (path,) = (runs_dir / "noise").glob("*.json")
    assert json.loads(path.read_text()) == rec and path.stem == rec["id"]
    assert set(rec) == KEYS | {"id", "host", "devices", "created_at"}
    assert len(rec["runs"]) == len(rec["throughputs"]) == 3 and min(rec["throughputs"]) > 0
    assert rec["config"]["max_steps"] == 12 and rec["devices"] == 1
    spread = record.spread_pct(rec["throughputs"])
    assert rec["spread_pct"] == pytest.approx(spread, abs=0.01)
    assert rec["margin_pct"] == pytest.approx(max(5.0, spread / 2), abs=0.01)
    for rid in rec["runs"]:  # they took turns: each ended before the next started
        assert json.loads((runs_dir / rid / "status.json").read_text())["state"] == "succeeded"
    starts = [json.loads((runs_dir / rid / "status.json").read_text()) for rid in rec["runs"]]
    assert all(a["ended_at"] <= b["started_at"] for a, b in zip(starts, starts[1:]))
    margin = latest_margin(runs_dir, socket.gethostname(), 1)
    assert margin is not None and margin.pct == rec["margin_pct"] and rec["id"] in margin.source
    assert latest_margin(runs_dir, socket.gethostname(), 2) is None


@pytest.mark.proc
def test_home_button_starts_the_measurement_in_the_background(runs_dir):
    from streamlit.testing.v1 import AppTest

    from lab.engine.launch import launcher
    from lab.engine.launch.sweeps import stop_sweep

    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=30)
    at.run()
    at.button(key="home_noise").click()
    at.run()
    assert not at.exception, at.exception
    assert any("3 runs" in s.value or "5 runs" in s.value for s in at.success)
    (child,) = [c for c in launcher._children if "noise" in c.args and c.poll() is None]
    try:
        end = time.monotonic() + 120
        sweeps = runs_dir / ".sweeps"
        while not list(sweeps.glob("sweep-*.json")) and time.monotonic() < end:
            time.sleep(0.3)
        (sweep,) = sweeps.glob("sweep-*.json")
        assert len(json.loads(sweep.read_text())["run_ids"]) == 5  # the default: 5 runs
        stop_sweep(sweep.stem, runs_dir)
    finally:
        child.kill()
        child.wait()
