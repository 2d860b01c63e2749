"""In-process checks of the trainer's small parts: batch splitting, hints, free memory, batching,
data.

The end-to-end behaviour is tested with real processes in the other
``test_train_*`` files; these pin down details that a process run cannot
reach on a CPU-only machine (the free-memory refusal, with
``torch.cuda.mem_get_info`` replaced by a stub that reports a nearly full
GPU) or that are cheaper to see directly (the in-memory batching path yields
exactly what the DataLoader would).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from training import data, models
from training.cli import BadInput, build_parser, split_batch, torchrun_hint
from training.distributed import Placement, check_free_memory, place
from training.loop import Loop
from training.metrics import Recorder


def test_split_batch_names_the_nearest_sizes():
    assert split_batch(64, 4, "GPUs") == 16
    with pytest.raises(BadInput, match=r"^batch 66 does not split over 4 GPUs: use 64 or 68$"):
        split_batch(66, 4, "GPUs")
    with pytest.raises(BadInput, match=r"^batch 3 does not split over 4 ranks: use 4$"):
        split_batch(3, 4, "ranks")


def test_torchrun_hint_puts_mode_first_and_keeps_the_rest():
    hint = torchrun_hint(["--log-dir", "runs/x y", "--mode=ddp", "--lr", "0.1"])
    assert hint == (
        "python -m torch.distributed.run --nproc-per-node 2 -m training.train --mode ddp "
        "--log-dir 'runs/x y' --lr 0.1"
    )


def test_free_memory_refusal(monkeypatch):
    # stub: no GPU here
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: (100 * 2**20, 80 * 2**30))
    p = Placement("dp", "dp", torch.device("cuda", 0), device_ids=[0, 1])
    with pytest.raises(BadInput, match=r"^cuda0 has 100 MiB free, the run needs about 256 MiB"):
        check_free_memory(p)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: (40 * 2**30, 80 * 2**30))
    check_free_memory(p)  # enough: no exception


def test_dp_on_cpu_falls_back_to_single_with_a_reason():
    # 66 would not split over 4 GPUs, but there are none: nothing to split
    p = place("dp", "cpu", 66)
    assert p.effective_mode == "single" and p.per_device_batch == 66
    assert p.effective_mode_reason == "DataParallel needs at least two GPUs; 0 visible"


@pytest.mark.parametrize("world,rank", [(1, 0), (2, 1)])
def test_in_memory_batches_equal_the_dataloader(tmp_path, world, rank):
    bundle = data.synthetic(8)
    args = build_parser().parse_args(
        ["--log-dir", str(tmp_path), "--batch-size", "64", "--seed", "5"]
    )
    p = Placement(
        "single",
        "single",
        torch.device("cpu"),
        rank=rank,
        world_size=world,
        per_device_batch=64 // world,
    )
    loop = Loop(
        args,
        p,
        bundle,
        models.build("tinycnn", 3, 10),
        Recorder(tmp_path, False),
        None,
        lambda: False,
    )
    loop.sampler.set_epoch(3)
    fast, slow = list(loop.batches()), list(loop.loader)
    assert len(fast) == len(slow) == (2048 // world) // (64 // world)
    for (fx, fy), (sx, sy) in zip(fast, slow):
        assert torch.equal(fx, sx) and torch.equal(fy, sy)
    assert not any(Path(tmp_path).iterdir())  # a disabled recorder writes nothing


def test_image_folder_with_held_out_split(tmp_path):
    from PIL import Image

    for label in ("cat", "dog"):
        (tmp_path / label).mkdir()
        for i in range(10):
            Image.new("RGB", (5, 7), (i * 20, 0, 0)).save(tmp_path / label / f"{i}.png")
    bundle = data.load(f"imagefolder:{tmp_path}", 8)
    assert (len(bundle.train), len(bundle.val), bundle.num_classes, bundle.channels) == (
        16,
        4,
        2,
        3,
    )
    x, y = bundle.train[0]
    assert x.shape == (3, 8, 8) and -1.0 <= float(x.min()) and float(x.max()) <= 1.0


def test_device_names_are_unique_across_nodes(monkeypatch):
    """Every node numbers its GPUs from cuda0: over several nodes the names carry the node
    (torchrun's GROUP_RANK)."""
    single = Placement("ddp", "ddp", torch.device("cuda", 1), rank=1, local_rank=1, world_size=2)
    assert single.device_names == ["cuda1"]  # one node: the contract's plain names
    names = [
        Placement(
            "ddp",
            "ddp",
            torch.device("cuda", lr),
            rank=n * 2 + lr,
            local_rank=lr,
            world_size=4,
            node_rank=n,
            nnodes=2,
        ).device_names[0]
        for n in (0, 1)
        for lr in (0, 1)
    ]
    assert names == ["node0:cuda0", "node0:cuda1", "node1:cuda0", "node1:cuda1"]
    assert Placement("dp", "dp", torch.device("cuda", 0), device_ids=[0, 1]).device_names == [
        "cuda0",
        "cuda1",
    ]
    assert Placement(
        "ddp", "ddp", torch.device("cpu"), rank=3, world_size=4, nnodes=2
    ).device_names == ["cpu3"]
    # place() reads the node from torchrun's variables, or from LOCAL_WORLD_SIZE without them
    for k, v in {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
    }.items():
        monkeypatch.setenv(k, v)
    p = place("ddp", "cpu", 64)
    assert (p.node_rank, p.nnodes, p.rank) == (1, 2, 3)
    monkeypatch.delenv("GROUP_RANK")
    monkeypatch.delenv("GROUP_WORLD_SIZE")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    p = place("ddp", "cpu", 64)
    assert (p.node_rank, p.nnodes) == (1, 2)


def test_gathered_memory_never_overwrites_a_rank():
    from training.metrics import merge_memory

    a, b = {"peak": 1.0}, {"peak": 2.0}
    assert merge_memory([{"node0:cuda0": a}, {"node1:cuda0": b}]) == {
        "node0:cuda0": a,
        "node1:cuda0": b,
    }
    # names two ranks share (a launcher that hides the node) are both kept: dict.update would keep
    # one
    assert merge_memory([{"cuda0": a}, {"cuda0": b}]) == {"cuda0": a, "rank1:cuda0": b}


def test_amp_skipped_steps_are_counted_not_warned(tmp_path, caplog):
    """fp16's first steps overflow and GradScaler skips them: counted in amp/skipped_steps, no inf
    warnings.

    FAKE: the trainer's GradScaler runs on CUDA only; here the same torch.amp.GradScaler runs on the
    CPU, and a gradient hook makes the first three steps' gradients overflow, as fp16's do. The loop
    itself is real."""
    import logging

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from training.metrics import GradWatch

    bundle = data.synthetic(8)
    args = build_parser().parse_args(
        [
            "--log-dir",
            str(tmp_path),
            "--batch-size",
            "64",
            "--max-steps",
            "12",
            "--grad-norm-warn",
            "1e-9",
            "--log-every",
            "4",
            "--checkpoint",
            "none",
        ]
    )
    p = Placement("single", "single", torch.device("cpu"), per_device_batch=64)
    rec = Recorder(tmp_path, True)
    model = models.build("tinycnn", 3, 10)
    backwards = []

    def overflow_first_three(grad: torch.Tensor) -> torch.Tensor:
        backwards.append(1)
        return grad * float("inf") if len(backwards) <= 3 else grad

    next(model.parameters()).register_hook(overflow_first_three)
    loop = Loop(args, p, bundle, model, rec, None, lambda: False)
    init = 2.0**16
    loop.scaler = torch.amp.GradScaler("cpu", init_scale=init)
    loop.grads.scaler_on = True  # as Loop sets it for an enabled (CUDA) scaler
    with caplog.at_level(logging.WARNING, logger="training.metrics"):
        out = loop.run()
    rec.close()
    assert out.amp_skipped_steps == 3 and len(backwards) == 12
    # the scaler did skip (and back off) exactly those steps
    assert loop.scaler.get_scale() == init / 2**3
    warned = [r.getMessage() for r in caplog.records]
    # finite norms only
    assert [w.split(":")[0] for w in warned] == [f"step {i}" for i in range(4, 13)], warned
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("amp/skipped_steps")] == [
        (4, 3.0),
        (8, 3.0),
        (12, 3.0),
    ]
    assert [e.step for e in acc.Scalars("train/grad_norm_warning")] == list(range(4, 13))
    # without a scaler nothing is skipped: a non-finite norm is a divergence, and is warned about
    assert GradWatch(torch.device("cpu"), False, 1.0).warning(float("inf"))
    assert not GradWatch(torch.device("cpu"), True, 1.0).warning(float("nan"))
    assert (
        GradWatch(torch.device("cpu"), True, 1.0).warning(2.0)
        and GradWatch(torch.device("cpu"), False, 1.0).skipped_steps() is None
    )
