"""``python -m lab`` as a user runs it: real subprocesses, real runs, JSON output, errors.

The CLI runs on a machine without GPUs (``CPU_BOX``: no NVML driver through
devices.py's test seam) unless a test says otherwise, so that
``--nproc 2`` and "GPU 0 does not exist" mean the same on a GPU box and in the
fake-GPU mode as here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from lab.runfolder import REPO_ROOT

pytestmark = pytest.mark.proc

# runs without GPUs get no CUDA
CPU_BOX = {"LAB_NVML_MODULE": "tests.fake_nvml", "LAB_TEST_FAKE_GPUS": "none"}


def lab(runs_dir, *args, timeout=120, machine=CPU_BOX):
    env = dict(os.environ, LAB_RUNS_DIR=str(runs_dir), OMP_NUM_THREADS="1", **machine)
    return subprocess.run(
        [sys.executable, "-m", "lab", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_launch_status_logs_stop_rm(runs_dir):
    t = time.monotonic()
    r = lab(
        runs_dir,
        "launch",
        "--mode",
        "ddp",
        "--nproc",
        "2",
        "--max-steps",
        "2",
        "--image-size",
        "8",
        "--batch-size",
        "32",
        "--log-every",
        "1",
        "--checkpoint",
        "none",
        "--name",
        "cli",
        "--tag",
        "t1",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t < 15  # returns once the supervisor is up (python start-up included)
    out = json.loads(r.stdout)
    run_id = out["run_id"]
    assert out["state"] in ("starting", "running") and out["run_dir"] == str(runs_dir / run_id)
    end = time.monotonic() + 120
    while time.monotonic() < end:
        st = json.loads(lab(runs_dir, "status", run_id, "--json").stdout)
        if st["state"] not in ("starting", "running"):
            break
        time.sleep(1)
    assert st["state"] == "succeeded" and st["exit_code"] == 0 and st["diagnosis"] is None
    assert {"run_id", "state", "mode", "created_at", "exit_code", "diagnosis"} <= set(st)
    listed = json.loads(lab(runs_dir, "status", "--json").stdout)
    assert [x["run_id"] for x in listed] == [run_id]
    assert "cli" in lab(runs_dir, "status").stdout
    r = lab(runs_dir, "logs", run_id, "--rank", "0", "-n", "50")
    assert r.returncode == 0 and "[rank 0]" in r.stdout
    r = lab(runs_dir, "logs", run_id, "--follow")  # a finished run: prints and returns
    assert r.returncode == 0 and r.stdout
    r = lab(runs_dir, "stop", run_id)
    assert r.returncode == 0 and "already succeeded: nothing to stop" in r.stdout
    r = lab(runs_dir, "rm", run_id)
    assert r.returncode == 0 and not (runs_dir / run_id).exists()


@pytest.mark.parametrize(
    "args,text",
    [
        (
            ["launch", "--mode", "ddp", "--nproc", "2", "--batch-size", "33"],
            "batch 33 does not split over 2 processes: use 32 or 34",
        ),
        (["status", "no-such-run"], "no run 'no-such-run'"),
    ],
)
def test_errors_are_one_line_and_exit_2(runs_dir, args, text):
    """A refusal as a shell sees it: exit status 2, one line on stderr. The whole table of refusals
    runs in-process (tests/test_cli_errors.py)."""
    r = lab(runs_dir, *args, timeout=60)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: ") and text in r.stderr, (
        r.stderr
    )
    assert "Traceback" not in r.stderr
    assert list(runs_dir.iterdir()) == []  # refused before any folder or process


def test_gpus_json_without_driver(runs_dir):
    r = lab(runs_dir, "gpus", "--json", timeout=60, machine={})  # this machine as it is
    assert r.returncode == 0
    snap = json.loads(r.stdout)
    assert set(snap) == {"gpus", "cpu", "reason", "taken_at", "notes", "topology", "topology_note"}
    assert snap["topology"] is None or snap["topology"]["gpus"] == [
        g["index"] for g in snap["gpus"]
    ]
    assert snap["cpu"]["cores"] >= 1
    if not snap["gpus"]:
        assert snap["reason"].startswith("no NVIDIA driver found")


@pytest.mark.slow
def test_sweep_json(runs_dir):
    r = lab(
        runs_dir,
        "sweep",
        "--modes",
        "single,dp",
        "--max-steps",
        "1",
        "--image-size",
        "8",
        "--checkpoint",
        "none",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["sweep_id"].startswith("sweep-") and len(out["run_ids"]) == 2
    modes = [
        json.loads((runs_dir / rid / "run.json").read_text())["config"]["mode"]
        for rid in out["run_ids"]
    ]
    assert modes == ["single", "dp"]
    r = lab(runs_dir, "stop", out["sweep_id"])  # stop the sweep as a whole: nothing stays alive
    assert r.returncode == 0
    states = [
        json.loads(lab(runs_dir, "status", rid, "--json").stdout)["state"] for rid in out["run_ids"]
    ]
    assert all(s in ("stopped", "succeeded") for s in states), states


def test_launch_dry_run_shows_the_command_of_the_defaults_and_starts_nothing(runs_dir):
    """With no options the command is RunConfig's defaults: the CLI restates none of them."""
    from lab.engine.launch.backends import build_command
    from lab.engine.launch.request import PORT_PLACEHOLDER, RUN_ID_PLACEHOLDER
    from lab.engine.spec.run import RunConfig

    r = lab(runs_dir, "launch", "--dry-run", "--json", timeout=60)
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    assert (
        shown["argv"]
        == build_command(RunConfig(), runs_dir / RUN_ID_PLACEHOLDER, PORT_PLACEHOLDER)[0]
    )
    assert shown["env"]["CUDA_VISIBLE_DEVICES"] == "" and shown["preflight"][0].startswith(
        "Devices: the CPU"
    )
    r = lab(
        runs_dir,
        "launch",
        "--dry-run",
        "--mode",
        "ddp",
        "--nproc",
        "2",
        "--tag",
        "a",
        "--env",
        "X=1",
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert (
        "--master-port '<port>'" in r.stdout
        and "X=1" in r.stdout
        and r.stdout.startswith("# Devices:")
    )
    assert list(runs_dir.iterdir()) == []
