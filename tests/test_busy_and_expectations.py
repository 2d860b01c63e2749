"""Busy means someone else; several training processes under single placement; preflight.json.

Real processes: a ``python -m lab status`` between two readings is not "another process" (the same
interval read by a meter that counts every process sees its CPU, ours does not); a user's script
that starts two busy workers, launched as a single-placement script run, gets status.json
``train_processes`` >= 2 and a preflight.json; a short trainer run watched with ``python -m lab
status`` every second is not flagged busy (skipped when others already load the machine). The
expectations of preflight.json and the lab-command rule are checked as values.
"""
# These tests start real processes (the ``proc`` kind of test).

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from lab.engine.devices import interference
from lab.engine.devices.interference import OtherCpu, is_lab_command, sample_is_busy
from lab.engine.preflight import expectations
from lab.engine.spec.run import RunConfig
from lab.runfolder import PREFLIGHT
from tests.helpers.cli import run_lab

TWO_WORKERS = '''"""Starts its own two training processes, as Lightning's DDP does."""
import subprocess, sys, time
BUSY = "import time\\nend = time.time() + 6\\nwhile time.time() < end: sum(range(10000))"
kids = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)]
for k in kids:
    k.wait()
'''


def _lab(runs_dir: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_lab(
        runs_dir, *args, timeout=timeout, CUDA_VISIBLE_DEVICES="", LAB_SAMPLE_INTERVAL_S="0.5"
    )


def _wait_final(run_dir: Path, timeout_s: float = 180) -> dict:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        status = json.loads((run_dir / "status.json").read_text() or "{}")
        if status.get("state") in ("succeeded", "failed", "stopped", "lost"):
            return status
        time.sleep(0.3)
    raise AssertionError(f"{run_dir.name} did not end in {timeout_s} s")


def test_the_lab_commands_and_server_are_not_others():
    assert is_lab_command([sys.executable, "-m", "lab", "status"])
    assert is_lab_command(["/venv/bin/streamlit", "run", "app.py"])
    assert is_lab_command([sys.executable, "-m", "streamlit", "run", "app.py"])
    # a run's supervisor and its training are someone else's run
    assert not is_lab_command([sys.executable, "-m", "lab.engine.supervise.supervisor", "x"])
    assert not is_lab_command([sys.executable, "-m", "training.train", "--mode", "single"])
    assert not is_lab_command([])


@pytest.mark.serial
@pytest.mark.proc
def test_a_lab_status_between_readings_is_not_counted(monkeypatch):
    ours, everyone = OtherCpu(), OtherCpu()
    monkeypatch.setattr(everyone, "_is_lab", lambda pid, ct: False)
    assert ours.read([]) is None and everyone.read([]) is None
    # a busy process whose command line reads as the lab's (``-m lab status``), alive at the reading
    busy = "import time\nend = time.time() + 1.5\nwhile time.time() < end: sum(range(10000))"
    t0 = time.monotonic()
    labby = subprocess.Popen(
        [sys.executable, "-c", busy, "-m", "lab", "status"], stdout=subprocess.DEVNULL
    )
    try:
        time.sleep(1.0)
        times = psutil.Process(labby.pid).cpu_times()
        labby_pct = 100 * (times.user + times.system) / (time.monotonic() - t0)
        a, b = ours.read([]), everyone.read([])
    finally:
        labby.kill()
        labby.wait()
    # the same interval: "everyone" counts the lab command, as much as it used, and ours does not
    # (one-sided: other agents' own ``python -m lab`` commands may add to the difference)
    assert labby_pct > 5
    assert b - a >= labby_pct - max(8.0, 0.25 * labby_pct), (a, b, labby_pct)


@pytest.mark.serial
@pytest.mark.proc
def test_single_placement_script_with_two_workers_and_its_preflight(tmp_path):
    runs_dir = tmp_path / "runs"
    script = tmp_path / "two_workers.py"
    script.write_text(TWO_WORKERS)
    r = _lab(runs_dir, "launch", "--script", str(script), "--mode", "single", "--json")
    assert r.returncode == 0, r.stderr
    run_dir = Path(json.loads(r.stdout)["run_dir"])
    status = _wait_final(run_dir)
    assert status["state"] == "succeeded", status
    # two children busy at once, each near a core on an idle machine: at least 2 trained together
    assert status["train_processes"] >= 2, status
    pre = json.loads((run_dir / PREFLIGHT).read_text())
    assert set(pre) == {"lines", "expectations"} and pre["expectations"] == []


def test_preflight_expectations():
    ddp = expectations.record(RunConfig(mode="ddp", nproc=2))
    assert ddp["expectations"] == [
        {
            "key": "cores_shared",
            "text": f"2 processes share {os.cpu_count()} cores, expect little or no speedup",
        }
    ]
    assert any(line.startswith("Devices: the CPU") for line in ddp["lines"])
    (dp,) = expectations.expectations(RunConfig(mode="dp"))
    assert dp["key"] == "dp_one_device" and "runs as single" in dp["text"]
    assert expectations.expectations(RunConfig(mode="dp", gpus=(0, 1))) == []
    assert expectations.expectations(RunConfig()) == []


@pytest.mark.serial
@pytest.mark.proc
def test_a_run_watched_by_status_every_second_is_not_busy(tmp_path):
    probe = OtherCpu()
    probe.read([])
    time.sleep(1.0)
    others = probe.read([]) or 0.0
    if sample_is_busy(others, probe.cores):
        pytest.skip(f"others use {others / 100:.1f} cores already: this machine is not idle")
    runs_dir = tmp_path / "runs"
    r = _lab(runs_dir, "launch", "--max-steps", "120", "--epochs", "6", "--json")
    assert r.returncode == 0, r.stderr
    run_dir = Path(json.loads(r.stdout)["run_dir"])
    polls = 0
    while True:
        status = json.loads((run_dir / "status.json").read_text() or "{}")
        if status.get("state") in ("succeeded", "failed", "stopped", "lost"):
            break
        _lab(runs_dir, "status")
        polls += 1
        time.sleep(1.0)
    assert status["state"] == "succeeded"
    rec = status["interference"]
    assert polls >= 2 and rec["samples"] >= 3, (polls, rec)
    # busy needs more than 10% of the samples and at least 3 of them
    assert rec["busy"] is False, (rec, interference.MIN_BUSY_SAMPLES)
