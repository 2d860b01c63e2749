"""FSDP on the CPU for real: the trainer's ``--mode fsdp`` as two gloo ranks under torchrun
(PyTorch's FSDP2, ``fully_shard``), checked against a single-device run.

With the same seed and global batch (the strided sampler, as for DDP) the sharded run's per-step
losses match the single run's to 1e-4 relative over 10 steps, with parameters resharded after the
forward (ZeRO-3, the default) and kept (``--reshard-after-forward off``), and with accumulation
(``--accum-steps 2``: FSDP skips the first micro-batch's reduce-scatter); a run stopped at step 5
writes its sharded checkpoint (``last.dcp``: both ranks' DCP files and the index) beside the
gathered ``last.pt``, and resumed from it on 2 ranks or resharded onto 1 (``--resume auto``), or
from ``last.pt`` as a single run, continues the same losses (1e-4 relative); the shards read whole
into a plain model give what ``last.pt`` holds; a sharded save cut short is never picked;
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
from tests.helpers.train_ddp import torchrun as torchrun_of
from training import checkpoint, knobs, sharded_checkpoint, sharding
from training.cli import BadInput, parse_args
from training.models import build

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}


def trainer(
    run: Path, *opts: str, ranks: int = 2, torchrun: bool | None = None
) -> subprocess.CompletedProcess:
    """The trainer on ``run``: ``ranks`` gloo ranks under torchrun in mode fsdp (1: a single run,
    unless ``torchrun``: fsdp on one rank)."""
    if not (ranks > 1 if torchrun is None else torchrun):
        cmd = [sys.executable, "-m", "training.train", "--log-dir", str(run), *SAME, *opts]
    else:
        cmd = torchrun_of("fsdp", run, *SAME, *opts, nproc=ranks)
    return subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def single(single_same) -> Path:
    """The single run of the same options (the session's: ``trainer(run, ranks=1)`` would be it)."""
    return single_same


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> Path:
    """An fsdp run of the same config stopped after step 5, its checkpoints written."""
    run = tmp_path_factory.mktemp("stopped") / "run"
    first = trainer(run, "--max-steps", "5")
    assert first.returncode == 0, first.stderr[-3000:]
    assert (run / "checkpoints" / "last.pt").is_file()
    return run


def agree(single: dict[int, float], other: dict[int, float], last: int = 10) -> None:
    """``other``'s losses are the single run's, step for step, through step ``last``."""
    assert sorted(other) == list(range(1, last + 1)) and sorted(single) == list(range(1, 11))
    for step in range(1, last + 1):
        assert abs(other[step] - single[step]) <= 1e-4 * abs(single[step]), (step, single, other)
    assert single[1] != single[last]  # the losses move, so agreeing is not trivial


@pytest.mark.proc
def test_fsdp_reproduces_the_single_runs_losses_with_each_rank_holding_half(single, stopped):
    """The first 5 steps of the run the resume tests below stop (parameters resharded after each
    block's forward: ZeRO-3); steps 6 to 10 on, after its resume, agree there too."""
    agree(losses(single), losses(stopped), last=5)
    summary = json.loads((stopped / "summary.json").read_text())
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


@pytest.mark.proc
def test_an_fsdp_checkpoint_is_sharded_by_each_rank_and_reads_whole_into_a_plain_model(stopped):
    """Both ranks wrote their DCP shards, rank 0 the index and trainer.json; nothing of the save
    is left beside it. Read into a single run's model and optimizer (no process group: the
    trainer's own ``restore``), the shards give exactly what the gathered last.pt holds."""
    folder = stopped / "checkpoints"
    dcp = folder / sharded_checkpoint.DIR
    names = {p.name for p in dcp.iterdir()}
    assert names == {".metadata", "__0_0.distcp", "__1_0.distcp", "trainer.json"}, names
    assert {p.name for p in folder.iterdir()} == {"last.pt", "last.dcp"}
    meta = json.loads((dcp / "trainer.json").read_text())
    assert (meta["step"], meta["epoch"], meta["batch_in_epoch"]) == (5, 0, 5)
    assert meta["world_size"] == 2 and meta["scaler"] is None and meta["config"]["mode"] == "fsdp"
    assert checkpoint.resolve("auto", stopped) == dcp  # written after last.pt: the newer
    gathered = checkpoint.load(folder / "last.pt")
    model = build("tinycnn", 1, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    checkpoint.restore(model, optimizer, checkpoint.load(dcp), "tinycnn", fsdp=False)
    assert model.state_dict().keys() == gathered["model"].keys()
    for k, v in model.state_dict().items():
        assert torch.equal(v, gathered["model"][k]), k
    momentum = {n: optimizer.state[p]["momentum_buffer"] for n, p in model.named_parameters()}
    assert momentum.keys() == gathered["optimizer"]["state"].keys()
    for n, buf in momentum.items():
        assert torch.equal(buf, gathered["optimizer"]["state"][n]["momentum_buffer"]), n


@pytest.mark.proc
@pytest.mark.parametrize(
    "resume, ranks, torchrun, says",
    [
        ("auto", 2, True, "each of the 2 ranks read its own shards"),
        ("auto", 1, True, "the shards of 2 ranks resharded onto 1"),
        ("last.pt", 1, False, "resumed from"),
        ("last.dcp", 1, False, "the shards of 2 fsdp ranks read whole into this single run"),
    ],
    ids=["sharded-2-ranks", "sharded-onto-1-rank", "gathered-single", "sharded-single"],
)
def test_a_stopped_fsdp_run_resumes_from_its_checkpoint_with_the_same_losses(
    tmp_path, single, stopped, resume, ranks, torchrun, says
):
    """``--resume auto`` picks the sharded checkpoint: DCP reads each rank's shards on 2 ranks,
    or reshards them onto 1 (and the strided sampler's position is the global batch's, whatever
    the rank count); the gathered last.pt holds the whole model and its optimizer state by name,
    so it resumes as a single run as well."""
    run = tmp_path / "run"
    shutil.copytree(stopped, run)
    given = resume if resume == "auto" else str(run / "checkpoints" / resume)
    again = trainer(run, "--resume", given, ranks=ranks, torchrun=torchrun)
    assert again.returncode == 0, again.stderr[-3000:]
    # it went on from step 5, not from scratch (which would reproduce the losses as well)
    assert "step 6/10" in again.stderr and "step 1/10" not in again.stderr, again.stderr[-2000:]
    assert says in again.stderr, again.stderr[-2000:]
    agree(losses(single), losses(run))  # steps 1-5 from the first part, 6-10 resumed


@pytest.mark.proc
def test_a_single_runs_checkpoint_resumes_as_fsdp_on_two_ranks_with_the_same_losses(
    tmp_path, single
):
    """A single run's last.pt keys its optimizer state by position; FSDP reads a whole state by
    parameter name (``checkpoint.keyed_by_name`` converts it): the momentum comes along, so the
    fsdp run's steps 6 to 10 are the single run's (before the fix: ``KeyError: '0'`` on rank 1)."""
    first = tmp_path / "single"
    done = trainer(first, "--max-steps", "5", ranks=1)
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "fsdp"
    again = trainer(run, "--resume", str(first / "checkpoints" / "last.pt"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "step 6/10" in again.stderr and "step 1/10" not in again.stderr, again.stderr[-2000:]
    both = {**losses(first), **losses(run)}
    agree(losses(single), both)


@pytest.mark.proc
def test_fsdp_trains_resnet18_in_bf16_with_its_batchnorm_in_fp32(tmp_path):
    """FSDP's bf16 policy casts BatchNorm's weight, not its fp32 running statistics: before, the
    first forward died ("expected scalar type BFloat16 but found Float"), while ddp trained. Now
    the BatchNorm layers are sharded apart in fp32 and resnet18 trains 3 steps on 2 ranks, with
    validation. A folder of 24 small images keeps it to seconds: bf16 convolutions are slow on
    this CPU (110-145 s for the same 3 steps on digits' 355 validation images)."""
    from PIL import Image

    images = tmp_path / "images"
    for label in range(2):
        (images / str(label)).mkdir(parents=True)
        for i in range(12):
            Image.new("RGB", (16, 16), (i * 20, label * 200, 0)).save(
                images / str(label) / f"{i}.png"
            )
    run = tmp_path / "run"
    opts = ["--model", "resnet18", "--precision", "bf16", "--dataset", f"imagefolder:{images}"]
    opts += ["--image-size", "16", "--batch-size", "8", "--max-steps", "3", "--epochs", "2"]
    done = trainer(run, *opts, "--checkpoint", "none")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["precision"] == "bf16" and summary["completed"]
    assert summary["effective_mode"] == "fsdp" and summary["final"]["val_loss"] is not None
    assert len(sharding.batchnorms(build("resnet18", 3, 2))) == 20  # each one sharded apart


def test_a_position_keyed_optimizer_state_is_keyed_by_the_models_parameter_names():
    """What FSDP's ``set_optimizer_state_dict`` reads whole: state and param groups by name, the
    i-th position the i-th of ``named_parameters``; a state of another model is a KeyError (the
    misfit's words), not a silent mismatch."""
    model = build("tinycnn", 1, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 1, 8, 8)).sum().backward()
    optimizer.step()
    named = checkpoint.keyed_by_name(optimizer.state_dict(), model)
    names = [n for n, _ in model.named_parameters()]
    assert list(named["state"]) == names and named["param_groups"][0]["params"] == names
    for n, p in model.named_parameters():
        assert torch.equal(
            named["state"][n]["momentum_buffer"], optimizer.state[p]["momentum_buffer"]
        )
    assert named["param_groups"][0]["lr"] == 0.1
    other = build("mobilenet_v3_small", 3, 10)
    with pytest.raises(KeyError, match="the optimizer holds 6 parameters"):
        checkpoint.keyed_by_name(optimizer.state_dict(), other)


def test_a_sharded_save_cut_short_is_never_picked(tmp_path):
    """``--resume auto`` takes the newest complete checkpoint: a folder without DCP's index or
    the trainer.json rank 0 writes last is skipped, the save in progress is never read, and the
    previous one moved aside for the rename is found when the run died between the two."""
    folder = tmp_path / "checkpoints"

    def sharded(name: str, *files: str) -> Path:
        (folder / name).mkdir(parents=True)
        for f in files:
            (folder / name / f).write_text("{}")
        return folder / name

    sharded(".last.dcp.tmp", ".metadata", "__0_0.distcp", "trainer.json")  # not renamed yet
    cut = sharded("last.dcp", "__0_0.distcp", "__1_0.distcp", ".metadata")  # no trainer.json
    assert checkpoint.resolve("auto", tmp_path) is None
    (folder / "last.pt").write_bytes(b"x")
    assert checkpoint.resolve("auto", tmp_path) == folder / "last.pt"
    with pytest.raises(BadInput, match="not a complete sharded checkpoint"):
        checkpoint.load(checkpoint.resolve(str(cut), tmp_path))
    shutil.rmtree(cut)
    old = sharded(".last.dcp.old", ".metadata", "__0_0.distcp", "trainer.json")
    os.utime(folder / "last.pt", (1, 1))  # the older of the two
    assert checkpoint.resolve("auto", tmp_path) == old
    with pytest.raises(BadInput, match="a sharded one is beside it"):
        checkpoint.resolve(str(folder / "missing.pt"), tmp_path)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--reshard-after-forward", "off"], "--reshard-after-forward is an option of FSDP"),
        (["--mode", "ddp", "--fsdp-cpu-offload"], "--fsdp-cpu-offload is an option of FSDP"),
        (["--mode", "fsdp", "--static-graph"], "--static-graph is an option of Distributed"),
    ],
)
def test_bad_fsdp_options_are_refused_with_the_fix(monkeypatch, argv, says):
    """The trainer's own parser, in this process, as under torchrun (RANK and WORLD_SIZE set);
    that a refusal reaches the user as one line and writes nothing is the process test above's."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(BadInput, match=re.escape(says)):
        parse_args([*argv, "--log-dir", "x"])


def test_channels_last_under_fsdp_is_refused_by_the_trainer_and_the_lab_in_one_line(monkeypatch):
    """FSDP2 shards contiguous parameters only (before: rank 1 died at start with
    NotImplementedError); the trainer and the lab's form share the one check."""
    from lab.engine.launch.knobs import knob_problems
    from lab.engine.spec.run import RunConfig

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(BadInput, match="--channels-last does not work with --mode fsdp") as e:
        parse_args(["--mode", "fsdp", "--channels-last", "--log-dir", "x"])
    assert "\n" not in str(e.value) and "use --mode ddp" in str(e.value)
    parse_args(["--mode", "ddp", "--channels-last", "--log-dir", "x"])  # ddp takes it
    said = dict(knob_problems(RunConfig(mode="fsdp", nproc=2, channels_last=True)))
    assert said["channels_last"] == str(e.value)
    assert "channels_last" not in dict(knob_problems(RunConfig(mode="ddp", channels_last=True)))


def test_cpu_offload_starts_gloo_beside_nccl_for_the_collectives_on_cpu_tensors():
    """With the shards on the CPU, the gradient norm's ``full_tensor()`` and the scaler's
    found-inf all-reduce run on CPU tensors: a lone NCCL group fails them. Only the backend string
    is checked here (no GPU on this machine: the placement says cuda, nothing is started)."""
    from training.distributed import backend_of

    gpu = SimpleNamespace(device=torch.device("cuda", 0), backend="nccl")
    assert backend_of(gpu, cpu_collectives=True) == "cuda:nccl,cpu:gloo"
    assert backend_of(gpu) == "nccl"
    cpu = SimpleNamespace(device=torch.device("cpu"), backend="gloo")
    assert backend_of(cpu, cpu_collectives=True) == "gloo"


@pytest.mark.parametrize("world, batch", [(2, 59), (2, 118), (3, 50), (4, 200), (400, 4)])
def test_every_rank_runs_the_same_number_of_validation_forwards(world, batch):
    """Under FSDP each forward all-gathers, so ranks must agree on the count (before: 355 images
    over 2 ranks at 59 a batch gave 4 forwards on rank 0 and 3 on rank 1, and the run hung after
    training). The real images are each rank's every world-th, each once; padding counts for
    nothing. 400 ranks over 355 images: some ranks have none and still run the forward."""
    from training.data import TensorImages
    from training.loop import Loop

    val = TensorImages(torch.randn(355, 1, 4, 4), torch.arange(355) % 10)
    counts, seen = set(), []
    for rank in range(world):
        fake = SimpleNamespace(
            p=SimpleNamespace(rank=rank, world_size=world),
            data=SimpleNamespace(val=val),
            args=SimpleNamespace(accum_steps=1, workers=0),
            loader_batch=batch,
        )
        batches = list(Loop.val_batches(fake))
        counts.add(len(batches))
        seen += [int(v) for _x, y, real in batches if real for v in y]
        assert all(x.shape[0] == y.shape[0] > 0 for x, y, _ in batches)
    assert len(counts) == 1, counts
    assert sorted(seen) == sorted(int(v) for v in val.labels)


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


@pytest.mark.proc
def test_fp16s_scaler_skips_the_step_on_every_rank_when_one_shard_overflows(tmp_path):
    """fp16 under fsdp trusts torch.amp.GradScaler on FSDP2's DTensor gradients (torchtitan's
    docs/fsdp.md; pytorch/pytorch#132816): its overflow check must span the ranks, or a rank whose
    own shard is finite would step while the other skips. Checked on the CPU with gloo (fp16 runs
    on CUDA only in the trainer; no GPU here): an inf in rank 1's shard skips step 1 everywhere."""
    script = Path(__file__).parent / "helpers" / "fsdp_scaler.py"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    cmd += ["--master-port", str(free_port()), "--log-dir", "torchrun-logs", str(script)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=ENV, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = [line for r in (0, 1) for line in (tmp_path / f"rank{r}.txt").read_text().splitlines()]
    assert seen == [
        f"rank {r} step {s} stepped {ok} scale {scale}"
        for r in (0, 1)
        for s, ok, scale in ((0, True, 1024.0), (1, False, 512.0), (2, True, 512.0))
    ]
