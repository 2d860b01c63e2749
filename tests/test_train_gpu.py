"""The trainer on real NVIDIA GPUs (marked ``gpu``: skipped where there is none).

These were written without a GPU to run them on; they check what the CPU
tests cannot: CUDA device names and memory tags, DataParallel over every
visible GPU with its batch-split refusal, DDP over NCCL, and profiling on a
GPU: DataParallel's scatter/replicate/gather in breakdown.json, kernels in the
trace, and the CUDA memory snapshot.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.train_ddp import torchrun

REPO = Path(__file__).resolve().parent.parent
SMALL = ["--image-size", "16", "--max-steps", "6", "--log-every", "2"]
pytestmark = pytest.mark.gpu


def gpus() -> int:
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return int(out.stdout.strip() or 0)


def train(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "training.train", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def test_single_on_cuda_reports_cuda0(tmp_path):
    run = tmp_path / "run"
    res = train("--device", "cuda", "--log-dir", str(run), "--amp", *SMALL)
    assert res.returncode == 0, res.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["devices"] == ["cuda0"] and summary["amp_dtype"] == "float16"
    assert summary["peak_mem_mib"]["cuda0"] > 0


def test_dp_splits_over_every_gpu_and_refuses_uneven_batches(tmp_path):
    n = gpus()
    if n < 2:
        pytest.skip("DataParallel needs two GPUs")
    bad = train(
        "--mode", "dp", "--batch-size", str(2 * n + 1), "--log-dir", str(tmp_path / "bad"), *SMALL
    )
    assert bad.returncode == 2 and bad.stderr.startswith(
        f"error: batch {2 * n + 1} does not split over {n} GPUs"
    )
    run = tmp_path / "run"
    res = train("--mode", "dp", "--batch-size", str(16 * n), "--log-dir", str(run), *SMALL)
    assert res.returncode == 0, res.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["effective_mode"] == "dp" and summary["devices"] == [
        f"cuda{i}" for i in range(n)
    ]


def test_ddp_over_nccl(tmp_path):
    if gpus() < 2:
        pytest.skip("DDP over NCCL needs two GPUs here")
    run = tmp_path / "run"
    res = subprocess.run(torchrun("ddp", run, *SMALL), cwd=REPO, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["backend"] == "nccl" and summary["devices"] == ["cuda0", "cuda1"]


def test_fsdp_in_fp16_shards_over_nccl_with_its_scaler(tmp_path):
    """fp16 under fsdp: FSDP2's fp16 policy and torch.amp.GradScaler on its DTensor gradients
    (the overflow check across ranks is tests/test_train_fsdp.py's, on the CPU); on every GPU
    there is, one rank each."""
    n = gpus()
    run = tmp_path / "run"
    res = subprocess.run(torchrun("fsdp", run, "--precision", "fp16", *SMALL, nproc=n), cwd=REPO,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["effective_mode"] == "fsdp" and summary["precision"] == "fp16"
    assert summary["devices"] == [f"cuda{i}" for i in range(n)]
    est = summary["memory"]["estimate_mib"]["cuda0"]
    assert (est["gathered"] > 0) == (n > 1)  # one rank shards nothing and gathers nothing


def test_dp_profile_has_scatter_replicate_gather(tmp_path):
    n = gpus()
    if n < 2:
        pytest.skip("DataParallel needs two GPUs")
    run = tmp_path / "run"
    res = train(
        "--mode",
        "dp",
        "--batch-size",
        str(16 * n),
        "--log-dir",
        str(run),
        "--profile-steps",
        "3:5",
        "--image-size",
        "16",
        "--max-steps",
        "6",
        "--log-every",
        "100",
    )
    assert res.returncode == 0, res.stderr
    b = json.loads((run / "profile" / "breakdown.json").read_text())
    assert b["device"] == "cuda" and b["effective_mode"] == "dp" and b["note"] is None
    ph = b["phases_ms"]
    assert ph["dp_scatter"] > 0 and ph["dp_replicate"] > 0 and ph["dp_gather"] > 0, ph
    # all inside forward
    assert ph["dp_scatter"] + ph["dp_replicate"] + ph["dp_gather"] <= ph["forward"] + 1e-6, ph


def test_profile_and_memory_snapshot_on_cuda(tmp_path):
    import gzip
    import pickle

    run = tmp_path / "run"
    res = train(
        "--device",
        "cuda",
        "--log-dir",
        str(run),
        "--profile-steps",
        "3:5",
        "--memory-snapshot",
        "2",
        "--image-size",
        "16",
        "--max-steps",
        "6",
        "--log-every",
        "100",
    )
    assert res.returncode == 0, res.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["profile"] == {
        "breakdown": "profile/breakdown.json",
        "memory_snapshots": ["profile/memory_snapshot_rank0.pickle"],
    }
    b = json.loads((run / "profile" / "breakdown.json").read_text())
    assert b["device"] == "cuda" and b["phases_ms"]["comm_total"] == 0.0
    assert b["phases_ms"]["other"] <= 0.15 * b["step_ms"], b
    with gzip.open(run / "profile" / "trace_rank0.json.gz", "rt") as f:
        assert any(e.get("cat") == "kernel" for e in json.load(f)["traceEvents"])
    with open(run / "profile" / "memory_snapshot_rank0.pickle", "rb") as f:
        snap = pickle.load(f)
    # allocations and their history were recorded
    assert snap["segments"] and any(snap["device_traces"])
