"""FSDP on the CPU for real: the trainer's ``--mode fsdp`` as two gloo ranks under torchrun
(PyTorch's FSDP2, ``fully_shard``), checked against a single-device run.

With the same seed and global batch (the strided sampler, as for DDP) the sharded run's per-step
losses match the single run's to 1e-4 relative over 10 steps, with parameters resharded after the
forward (ZeRO-3, the default) and kept (``--reshard-after-forward off``), and with accumulation
(``--accum-steps 2``: FSDP skips the first micro-batch's reduce-scatter); a run stopped at step 5
and resumed from its gathered checkpoint, as fsdp or as a single run, continues the same losses;
summary.json shows each rank's
estimate with parameters, gradients and optimizer state halved. Refusals are one line before
anything starts. Every run is pinned to the CPU (``CUDA_VISIBLE_DEVICES=""``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.train_ddp import SAME, free_port, losses
from training import sharding
from training.models import build

pytestmark = pytest.mark.proc

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}


def trainer(run: Path, *opts: str, ranks: int = 2) -> subprocess.CompletedProcess:
    """The trainer on ``run``: ``ranks`` gloo ranks under torchrun in mode fsdp (1: single)."""
    common = ["-m", "training.train", "--log-dir", str(run), *SAME, *opts]
    if ranks == 1:
        cmd = [sys.executable, *common]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks)]
        cmd += ["--master-port", str(free_port()), *common, "--mode", "fsdp"]
    return subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("single") / "run"
    done = trainer(run, ranks=1)
    assert done.returncode == 0, done.stderr[-3000:]
    return run


def agree(single: dict[int, float], other: dict[int, float]) -> None:
    assert sorted(other) == sorted(single) == list(range(1, 11))
    for step in range(1, 11):
        assert abs(other[step] - single[step]) <= 1e-4 * abs(single[step]), (step, single, other)
    assert single[1] != single[10]  # the losses move, so agreeing is not trivial


@pytest.mark.parametrize("reshard", ["on", "off"])
def test_fsdp_reproduces_the_single_runs_losses(tmp_path, single, reshard):
    run = tmp_path / "run"
    done = trainer(run, "--reshard-after-forward", reshard)
    assert done.returncode == 0, done.stderr[-3000:]
    agree(losses(single), losses(run))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["effective_mode"] == "fsdp" and summary["world_size"] == 2
    one = json.loads((single / "summary.json").read_text())["memory"]["estimate_mib"]["cpu0"]
    for dev in ("cpu0", "cpu1"):  # each rank holds half the parameters, gradients and momentum
        each = summary["memory"]["estimate_mib"][dev]
        for part in ("parameters", "gradients", "optimizer"):
            assert each[part] == pytest.approx(one[part] / 2, abs=0.002), (dev, part)


def test_fsdp_with_accumulation_reproduces_the_single_runs_losses(tmp_path, single):
    run = tmp_path / "run"
    done = trainer(run, "--accum-steps", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    agree(losses(single), losses(run))


@pytest.mark.parametrize("ranks", [2, 1], ids=["fsdp", "single"])
def test_a_stopped_fsdp_run_resumes_from_its_checkpoint_with_the_same_losses(
    tmp_path, single, ranks
):
    """Resumed as fsdp on 2 ranks, or as a single run: the gathered checkpoint holds the whole
    model and its optimizer state by name, whatever the rank count that reads it."""
    run = tmp_path / "run"
    first = trainer(run, "--max-steps", "5")
    assert first.returncode == 0, first.stderr[-3000:]
    saved = run / "checkpoints" / "last.pt"
    assert saved.is_file()
    again = trainer(run, "--resume", str(saved), ranks=ranks)
    assert again.returncode == 0, again.stderr[-3000:]
    # it went on from step 5, not from scratch (which would reproduce the losses as well)
    assert "step 6/10" in again.stderr and "step 1/10" not in again.stderr, again.stderr[-2000:]
    agree(losses(single), losses(run))  # steps 1-5 from the first part, 6-10 resumed


@pytest.mark.parametrize(
    "opts, ranks, says",
    [
        (["--mode", "fsdp"], 1, "--mode fsdp must be started by torchrun"),
        (["--reshard-after-forward", "off"], 1, "--reshard-after-forward is an option of FSDP"),
        (["--static-graph"], 2, "--static-graph is an option of DistributedDataParallel"),
        (["--precision", "fp16"], 2, "sharded gradient scaler"),
        (["--fsdp-cpu-offload"], 2, "this run is on the CPU already"),
    ],
)
def test_bad_fsdp_input_is_one_line_and_starts_nothing(tmp_path, opts, ranks, says):
    run = tmp_path / "run"
    done = trainer(run, *opts, ranks=ranks)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert errors and says in errors[0], done.stderr[-2000:]
    assert not (run / "tb").exists()  # refused before anything was written


def test_each_model_family_is_sharded_by_its_blocks_else_by_parameter_count():
    names = {
        m: {type(u).__name__ for u in sharding.units(build(m, 3, 10))}
        for m in ("resnet18", "vit_b_16", "mobilenet_v3_small", "tinycnn")
    }
    assert (
        names["resnet18"] == {"BasicBlock"} and len(sharding.units(build("resnet18", 3, 10))) == 8
    )
    assert names["vit_b_16"] == {"EncoderBlock"}
    assert names["mobilenet_v3_small"] == {"InvertedResidual"}
    tiny = build("tinycnn", 3, 10)
    total = sum(p.numel() for p in tiny.parameters())
    units = sharding.units(tiny)
    assert units and all(
        sum(p.numel() for p in u.parameters()) * sharding.FALLBACK_SHARE >= total for u in units
    )
