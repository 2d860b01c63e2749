"""The trainer end to end on CPU, as real processes: tags, summary, resume, grad-norm watch,
SIGTERM.

Every test starts ``python -m training.train`` as a subprocess on the digits
sample set and reads what it wrote: events with TensorBoard's own
EventAccumulator (independent of the lab's reader), JSON files as files.
Runs are kept tiny (``--image-size 16``, a few dozen steps) because torch's
import alone takes seconds here. Every run is pinned to the CPU
(``CUDA_VISIBLE_DEVICES=""``): the expectations (``mem/cpu0``, DP falling back)
are the CPU's, and must hold on a machine with GPUs too.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.helpers.train_run import CPU_ENV, REPO, trainer

pytestmark = pytest.mark.proc

SMALL = ["--image-size", "16", "--batch-size", "32", "--lr", "0.1"]


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.fixture(scope="module")
def run30(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One single-device run of 30 steps, logging every step; it crosses one epoch end (22
    steps)."""
    run = tmp_path_factory.mktemp("single") / "run"
    res = trainer(
        "--log-dir",
        str(run),
        "--max-steps",
        "30",
        "--epochs",
        "3",
        "--log-every",
        "1",
        "--image-size",
        "16",
        "--batch-size",
        "64",
        "--lr",
        "0.1",
        "--grad-norm-warn",
        "1e6",  # a limit no step reaches: no warning (the test below)
    )
    return run, res


def test_no_grad_norm_warning_under_a_high_limit(run30):
    run, res = run30
    assert res.returncode == 0, res.stderr
    assert "train/grad_norm_warning" not in scalars(run) and "WARNING step" not in res.stderr


def test_single_run_writes_every_tag_and_learns(run30):
    run, res = run30
    assert res.returncode == 0, res.stderr
    tags = scalars(run)
    expected = {
        "train/loss",
        "train/acc",
        "train/lr",
        "train/grad_norm",
        "val/loss",
        "val/acc",
        "perf/samples_per_sec",
        "perf/step_time_ms",
        "perf/data_time_ms",
        "perf/epoch_time_s",
        "mem/cpu0/allocated_mib",
        "mem/cpu0/peak_mib",
        "mem/cpu0/reserved_mib",
        "mem/cpu0/peak_reserved_mib",
    }
    assert expected <= set(tags), expected - set(tags)
    loss = [v for _, v in tags["train/loss"]]
    assert [s for s, _ in tags["train/loss"]] == list(range(1, 31))
    assert sum(loss[-5:]) / 5 < 0.8 * sum(loss[:5]) / 5, loss
    assert tags["perf/epoch_time_s"][0][0] == 22  # 1442 images // 64 = 22 steps per epoch
    assert all(v > 0 for _, v in tags["mem/cpu0/peak_mib"])
    assert "step 30/30 loss" in res.stderr


def test_single_run_summary_and_progress(run30):
    run, res = run30
    summary = json.loads((run / "summary.json").read_text())
    assert summary["completed"] is True
    assert summary["steps"] == 30 and summary["samples_seen"] == 30 * 64
    assert summary["epochs_completed"] == 1
    assert summary["steady_excluded_steps"] == 5
    assert summary["steady_throughput_samples_per_sec"] > 0
    assert summary["devices"] == ["cpu0"] and summary["world_size"] == 1
    assert summary["config"]["max_steps"] == 30
    assert 0 <= summary["final"]["val_acc"] <= 1
    progress = json.loads((run / "progress.json").read_text())
    assert progress["step"] == 30 and progress["total_steps"] == 30
    assert {"epoch", "epochs", "samples_per_sec", "elapsed_s", "updated_at"} <= set(progress)
    assert (run / "checkpoints" / "last.pt").is_file()
    assert not [p for p in run.rglob("*.tmp")]  # atomic writes leave no temp files
    # profiling is off by default
    assert "profile" not in summary and not (run / "profile").exists()
    # issue 33: the allocator's peak reserve beside the allocated peak; what decides OOM; BatchNorm
    assert summary["peak_reserved_mib"]["cpu0"] >= summary["peak_mem_mib"]["cpu0"] * 0.99 > 0
    assert "peak_reserved_mib" in summary["oom_note"] and "NVML" in summary["oom_note"]
    assert summary["batchnorm"] is False and summary["sync_bn"] is False  # tinycnn has no BatchNorm


def test_resume_continues_exactly_where_it_stopped(run30, tmp_path):
    """5 steps, then --resume auto to 10: steps 6..10 match the uninterrupted run's losses."""
    uninterrupted = dict(scalars(run30[0])["train/loss"])
    run = tmp_path / "run"
    common = [
        "--log-dir",
        str(run),
        "--log-every",
        "1",
        "--epochs",
        "3",
        "--image-size",
        "16",
        "--batch-size",
        "64",
        "--lr",
        "0.1",
    ]
    first = trainer(*common, "--max-steps", "5")
    assert first.returncode == 0, first.stderr
    second = trainer(*common, "--max-steps", "10", "--resume", "auto")
    assert second.returncode == 0, second.stderr
    assert "at step 5 (epoch 0, 5 steps into it)" in second.stderr
    resumed = [(s, v) for s, v in scalars(run)["train/loss"] if s > 5]
    assert [s for s, _ in resumed] == [6, 7, 8, 9, 10]
    for s, v in resumed:
        assert abs(v - uninterrupted[s]) <= 1e-5 * abs(uninterrupted[s]), (s, v, uninterrupted[s])
    assert json.loads((run / "summary.json").read_text())["steps"] == 10
    late = trainer(*common, "--max-steps", "20", "--resume", "auto", "--profile-steps", "8:12")
    assert late.returncode == 2 and late.stderr.splitlines() == [
        "error: --profile-steps 8:12 starts at or before step 10, where this run resumes: start "
        "it at 11 or later"
    ]


@pytest.fixture(scope="module")
def dp_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """--mode dp on a machine without GPUs, with a grad-norm limit every step exceeds."""
    run = tmp_path_factory.mktemp("dp") / "run"
    res = trainer(
        "--mode",
        "dp",
        "--log-dir",
        str(run),
        "--max-steps",
        "3",
        "--grad-norm-warn",
        "1e-6",
        *SMALL,
    )
    return run, res


def test_dp_without_gpus_reports_single(dp_run):
    run, res = dp_run
    assert res.returncode == 0, res.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["mode"] == "dp" and summary["effective_mode"] == "single"
    assert "two GPUs" in summary["effective_mode_reason"]
    assert "nothing to split" in res.stderr


def test_grad_norm_warning(dp_run):
    run, res = dp_run
    tags = scalars(run)
    warned = tags["train/grad_norm_warning"]
    assert [s for s, _ in warned] == [1, 2, 3] and all(v > 1e-6 for _, v in warned)
    assert res.stderr.count("WARNING step") == 3 and "--grad-norm-warn" in res.stderr


def test_sigterm_stops_promptly_with_143(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "training.train",
            "--log-dir",
            str(run),
            "--epochs",
            "1000",
            "--log-every",
            "1",
            *SMALL,
        ],
        cwd=REPO,
        env=CPU_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (run / "progress.json").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the run never started"
            time.sleep(0.1)
        t = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        took = time.monotonic() - t
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read()
    assert proc.returncode == 143, stderr
    assert took < 5, took
    assert "Traceback" not in stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["completed"] is False
    last = run / "checkpoints" / "last.pt"
    if last.exists():  # epoch ends (45 steps each) checkpoint; the stop itself must not
        import torch

        step = torch.load(last, weights_only=True)["step"]
        assert step % 45 == 0 and step <= summary["steps"], step
