"""In-process checks of the trainer's small parts: batch splitting, hints, free memory, batching, data.

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
    assert hint == ("python -m torch.distributed.run --nproc-per-node 2 -m training.train --mode ddp "
                    "--log-dir 'runs/x y' --lr 0.1")


def test_free_memory_refusal(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: (100 * 2**20, 80 * 2**30))  # stub: no GPU here
    p = Placement("dp", "dp", torch.device("cuda", 0), device_ids=[0, 1])
    with pytest.raises(BadInput, match=r"^cuda0 has 100 MiB free, the run needs about 256 MiB"):
        check_free_memory(p)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: (40 * 2**30, 80 * 2**30))
    check_free_memory(p)  # enough: no exception


def test_dp_on_cpu_falls_back_to_single_with_a_reason():
    p = place("dp", "cpu", 66)  # 66 would not split over 4 GPUs, but there are none: nothing to split
    assert p.effective_mode == "single" and p.per_device_batch == 66
    assert p.effective_mode_reason == "DataParallel needs at least two GPUs; 0 visible"


@pytest.mark.parametrize("world,rank", [(1, 0), (2, 1)])
def test_in_memory_batches_equal_the_dataloader(tmp_path, world, rank):
    bundle = data.synthetic(8)
    args = build_parser().parse_args(["--log-dir", str(tmp_path), "--batch-size", "64", "--seed", "5"])
    p = Placement("single", "single", torch.device("cpu"), rank=rank, world_size=world, per_device_batch=64 // world)
    loop = Loop(args, p, bundle, models.build("tinycnn", 3, 10), Recorder(tmp_path, False), None, lambda: False)
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
    assert (len(bundle.train), len(bundle.val), bundle.num_classes, bundle.channels) == (16, 4, 2, 3)
    x, y = bundle.train[0]
    assert x.shape == (3, 8, 8) and -1.0 <= float(x.min()) and float(x.max()) <= 1.0
