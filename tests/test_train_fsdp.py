"""FSDP on the CPU for real: the trainer's ``--mode fsdp`` as two gloo ranks under torchrun
(PyTorch's FSDP2, ``fully_shard``), checked against a single-device run.

With the same seed and global batch (the strided sampler, as for DDP) the sharded run's per-step
losses match the single run's to 1e-4 relative over 10 steps, with parameters resharded after the
forward (ZeRO-3, the default) and kept (``--reshard-after-forward off``), and with accumulation
(``--accum-steps 2``: FSDP skips the first micro-batch's reduce-scatter); a run stopped at step 5
and resumed from its gathered checkpoint, as fsdp or as a single run, continues the same losses;
summary.json shows each rank's estimate with parameters, gradients and optimizer state halved.
Refusals are one line before anything starts (one process test; the parser's and the device
check's refusals in this process, as the quick tier runs them). Every run is pinned to the CPU
(``CUDA_VISIBLE_DEVICES=""``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.helpers.train_ddp import SAME, free_port, losses
from training import knobs, sharding
from training.cli import BadInput, parse_args
from training.models import build

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


@pytest.mark.proc
def test_fsdp_reproduces_the_single_runs_losses_with_each_rank_holding_half(tmp_path, single):
    run = tmp_path / "run"
    done = trainer(run)  # parameters resharded after each block's forward: ZeRO-3
    assert done.returncode == 0, done.stderr[-3000:]
    agree(losses(single), losses(run))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["effective_mode"] == "fsdp" and summary["world_size"] == 2
    one = json.loads((single / "summary.json").read_text())["memory"]["estimate_mib"]["cpu0"]
    for dev in ("cpu0", "cpu1"):  # each rank holds half the parameters, gradients and momentum
        each = summary["memory"]["estimate_mib"][dev]
        for part in ("parameters", "gradients", "optimizer"):
            assert each[part] == pytest.approx(one[part] / 2, abs=0.002), (dev, part)


@pytest.mark.proc
def test_fsdp_keeping_parameters_and_accumulating_reproduces_the_same_losses(tmp_path, single):
    """ZeRO-2-like (gathered parameters kept from forward to backward) and two micro-batches a
    step (the first one's reduce-scatter skipped): neither changes what the step computes."""
    run = tmp_path / "run"
    done = trainer(run, "--reshard-after-forward", "off", "--accum-steps", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    agree(losses(single), losses(run))


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> Path:
    """An fsdp run of the same config stopped after step 5, its checkpoint written."""
    run = tmp_path_factory.mktemp("stopped") / "run"
    first = trainer(run, "--max-steps", "5")
    assert first.returncode == 0, first.stderr[-3000:]
    assert (run / "checkpoints" / "last.pt").is_file()
    return run


@pytest.mark.proc
@pytest.mark.parametrize("ranks", [2, 1], ids=["fsdp", "single"])
def test_a_stopped_fsdp_run_resumes_from_its_checkpoint_with_the_same_losses(
    tmp_path, single, stopped, ranks
):
    """Resumed as fsdp on 2 ranks, or as a single run: the gathered checkpoint holds the whole
    model and its optimizer state by name, whatever the rank count that reads it."""
    run = tmp_path / "run"
    shutil.copytree(stopped, run)
    again = trainer(run, "--resume", str(run / "checkpoints" / "last.pt"), ranks=ranks)
    assert again.returncode == 0, again.stderr[-3000:]
    # it went on from step 5, not from scratch (which would reproduce the losses as well)
    assert "step 6/10" in again.stderr and "step 1/10" not in again.stderr, again.stderr[-2000:]
    agree(losses(single), losses(run))  # steps 1-5 from the first part, 6-10 resumed


@pytest.mark.proc
def test_fsdp_outside_torchrun_is_one_line_and_writes_nothing(tmp_path):
    run = tmp_path / "run"
    done = trainer(run, "--mode", "fsdp", ranks=1)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "--mode fsdp must be started by torchrun" in errors[0]
    assert "torch.distributed.run" in errors[0] and "--mode fsdp" in errors[0]  # the fix, runnable
    assert not run.exists()  # refused before anything was written


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--reshard-after-forward", "off"], "--reshard-after-forward is an option of FSDP"),
        (["--mode", "ddp", "--fsdp-cpu-offload"], "--fsdp-cpu-offload is an option of FSDP"),
        (["--mode", "fsdp", "--static-graph"], "--static-graph is an option of Distributed"),
        (["--mode", "fsdp", "--precision", "fp16"], "sharded gradient scaler"),
        (["--mode", "fsdp", "--amp"], "casts through its own policy"),
    ],
)
def test_bad_fsdp_options_are_refused_with_the_fix(monkeypatch, argv, says):
    """The trainer's own parser, in this process, as under torchrun (RANK and WORLD_SIZE set);
    that a refusal reaches the user as one line and writes nothing is the process test above's."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(BadInput, match=re.escape(says)):
        parse_args([*argv, "--log-dir", "x"])


def test_cpu_offload_on_the_cpu_is_refused_once_the_devices_are_known():
    args = parse_args(["--log-dir", "x"])
    args.mode, args.fsdp_cpu_offload = "fsdp", True
    cpu = SimpleNamespace(device=torch.device("cpu"), world_size=2, device_ids=[])
    with pytest.raises(BadInput, match="this run is on the CPU already"):
        knobs.check(args, cpu)


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
