"""Issue 33's GPU-only items on real NVIDIA GPUs (marked ``gpu``: skipped where there is none; run
by ``scripts/gpu_check.py``'s ``pytest -m gpu`` step).

Written without a GPU to run them on: DataParallel's replicas compute in bf16 when asked (autocast
entered in each replica thread, ``training.knobs.AutocastForward``); bf16 is allowed exactly where
the GPU's compute capability is 8.0 or more; summary.json's memory estimate on CUDA with
``--precision bf16 --accum-steps 2`` equals the pre-flight's for the same config.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.gpu


def test_dp_replicas_compute_in_bf16_when_asked():
    import torch
    from torch import nn

    from training import knobs

    n = torch.cuda.device_count()
    if n < 2:
        pytest.skip("DataParallel needs two GPUs")
    if any(torch.cuda.get_device_capability(i) < (8, 0) for i in range(n)):
        pytest.skip("bf16 needs compute capability 8.0 on every GPU")
    dtypes: list[torch.dtype] = []

    class Probe(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.fc(x)
            dtypes.append(y.dtype)  # in each replica's thread
            return y

    inner = knobs.AutocastForward(Probe().cuda(0), "cuda", torch.bfloat16)
    dp = nn.DataParallel(inner, device_ids=list(range(n)))
    with torch.autocast("cuda", dtype=torch.bfloat16):  # as the loop enters it around DP too
        out = dp(torch.randn(4 * n, 8, device="cuda:0"))
    assert len(dtypes) == n and set(dtypes) == {torch.bfloat16}, dtypes
    assert out.dtype == torch.bfloat16


def test_bf16_is_allowed_exactly_from_compute_capability_8():
    import torch

    from training import knobs

    for i in range(torch.cuda.device_count()):
        cc = torch.cuda.get_device_capability(i)
        problem = knobs.bf16_problem([i])
        assert (problem is None) == (cc >= (8, 0)), (i, cc, problem)


# proc: one short trainer run on the first GPU
def test_cuda_summary_estimate_equals_the_preflight_s(tmp_path):
    import torch

    from lab.engine.preflight import estimate
    from lab.engine.spec.run import RunConfig

    if torch.cuda.get_device_capability(0) < (8, 0):
        pytest.skip("bf16 needs compute capability 8.0")
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "training.train", "--device", "cuda", "--dataset", "synthetic"]
    argv += ["--precision", "bf16", "--accum-steps", "2", "--batch-size", "64"]
    argv += ["--image-size", "16", "--max-steps", "2", "--checkpoint", "none"]
    res = subprocess.run(
        [*argv, "--log-dir", str(run)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "0"},
    )
    assert res.returncode == 0, res.stderr
    s = json.loads((run / "summary.json").read_text())
    total = s["memory"]["estimate_mib"]["cuda0"]["total"]
    c = RunConfig(gpus=(0,), batch_size=64, image_size=16, precision="bf16", accum_steps=2)
    assert total == pytest.approx(estimate.per_gpu(c)[0].total_mib, abs=2e-3)
    assert s["precision"] == "bf16" and s["micro_batch"] == 32
