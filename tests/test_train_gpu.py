"""The trainer on real NVIDIA GPUs (marked ``gpu``: skipped where there is none).

These were written without a GPU to run them on; they check what the CPU
tests cannot: CUDA device names and memory tags, DataParallel over every
visible GPU with its batch-split refusal, and DDP over NCCL.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SMALL = ["--image-size", "16", "--max-steps", "6", "--log-every", "2"]
pytestmark = pytest.mark.gpu


def gpus() -> int:
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                         capture_output=True, text=True, timeout=120)
    return int(out.stdout.strip() or 0)


def train(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "training.train", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


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
    bad = train("--mode", "dp", "--batch-size", str(2 * n + 1), "--log-dir", str(tmp_path / "bad"), *SMALL)
    assert bad.returncode == 2 and bad.stderr.startswith(f"error: batch {2 * n + 1} does not split over {n} GPUs")
    run = tmp_path / "run"
    res = train("--mode", "dp", "--batch-size", str(16 * n), "--log-dir", str(run), *SMALL)
    assert res.returncode == 0, res.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["effective_mode"] == "dp" and summary["devices"] == [f"cuda{i}" for i in range(n)]


def test_ddp_over_nccl(tmp_path):
    if gpus() < 2:
        pytest.skip("DDP over NCCL needs two GPUs here")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                          str(port), "-m", "training.train", "--mode", "ddp", "--log-dir", str(run), *SMALL],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["backend"] == "nccl" and summary["devices"] == ["cuda0", "cuda1"]
