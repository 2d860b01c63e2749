"""What the trainer's harness costs: its samples/s against a bare PyTorch loop, side by side.

Both sides train ``tinycnn`` on the digits sample set (the same decoded
tensors, via ``training.data``), same global batch, same steps, same seed,
same thread count, in this one process, interleaved in ABBA order (trainer,
bare, bare, trainer, ...) so drift in machine load and the cost of going first
in a pair hit both sides alike. The trainer side is the real
``training.loop.Loop`` in ``--mode single`` with its Recorder writing events
and progress.json into a temp run folder every ``--log-every`` steps; the
validation set is left empty and checkpoints off, since the bare loop does
neither (they are work, not overhead). The bare side is the ~20-line loop in
``bare_loop``. A warm-up pair runs first and is not counted. Only the steps
are timed (not building the model or opening the event file), by the wall
clock and by this process's CPU time; on a shared machine
the CPU-time ratio is the steadier one (other processes' load does not enter
it). Prints medians of both, their ratio trainer / bare, and the median of the
ratios of adjacent pairs, which cancels slow drifts in load (target >= 0.97).

    python bench/harness_overhead.py [--repeats 6] [--steps 100] [--batch 64] [--image-size 32]
    [--threads 1]"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def bare_loop(bundle, steps: int, batch: int, seed: int) -> tuple[float, float]:
    """Shuffle, index, forward, backward, step: nothing else. Returns (wall s, CPU s) of the
    steps."""
    import torch
    from torch import nn

    from training import models

    images, labels = bundle.train.images, bundle.train.labels
    torch.manual_seed(seed)
    model = models.build("tinycnn", bundle.channels, bundle.num_classes)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    step, epoch, clock = 0, 0, Clock()
    while step < steps:
        # The trainer's sample order (DistributedSampler's permutation for seed + epoch), so both
        # sides compute on the same batches and only the harness differs.
        gen = torch.Generator().manual_seed(seed + epoch)
        perm = torch.randperm(len(labels), generator=gen)
        epoch += 1
        for i in range(0, len(perm) - batch + 1, batch):
            idx = perm[i : i + batch]
            loss = criterion(model(images[idx]), labels[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step == steps:
                break
    return clock.read()


def trainer_loop(bundle, steps: int, batch: int, seed: int, log_every: int) -> tuple[float, float]:
    """The trainer's own loop and recorder, as ``python -m training.train --mode single`` runs
    them."""
    import torch

    from training import models
    from training.cli import build_parser
    from training.distributed import place
    from training.loop import Loop
    from training.metrics import Recorder

    with tempfile.TemporaryDirectory(prefix="bench-harness-") as tmp:
        args = build_parser().parse_args(
            [
                "--log-dir",
                tmp,
                "--device",
                "cpu",
                "--epochs",
                "1000",
                "--max-steps",
                str(steps),
                "--batch-size",
                str(batch),
                "--seed",
                str(seed),
                "--log-every",
                str(log_every),
                "--checkpoint",
                "none",
            ]
        )
        torch.manual_seed(seed)
        model = models.build("tinycnn", bundle.channels, bundle.num_classes)
        recorder = Recorder(Path(tmp), enabled=True)
        recorder.open()
        loop = Loop(
            args, place("single", "cpu", batch), bundle, model, recorder, None, stop=lambda: False
        )
        clock = Clock()
        loop.run()
        took = clock.read()
        recorder.close()
        return took


class Clock:
    """Wall and process-CPU seconds since creation."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def read(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def main() -> None:
    p = argparse.ArgumentParser(
        description="trainer vs bare-loop samples/s, interleaved in one process"
    )
    p.add_argument("--repeats", type=int, default=6)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--log-every", type=int, default=10)
    a = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch

    from training import data

    torch.set_num_threads(a.threads)
    bundle = data.load("digits", a.image_size)
    bundle.val = data.TensorImages(bundle.train.images[:0], bundle.train.labels[:0])
    sides = {
        "trainer": lambda: trainer_loop(bundle, a.steps, a.batch, 0, a.log_every),
        "bare": lambda: bare_loop(bundle, a.steps, a.batch, 0),
        # A second, identical bare loop: bare/bare2 is this machine's noise floor for the
        # ratio above (measured here: two identical loops differ by several percent).
        "bare2": lambda: bare_loop(bundle, a.steps, a.batch, 0),
    }
    # warm-up: first-call costs (allocator, autograd, imports) not counted
    for fn in sides.values():
        fn()
    wall: dict[str, list[float]] = {k: [] for k in sides}
    cpu: dict[str, list[float]] = {k: [] for k in sides}
    samples = a.steps * a.batch
    for i in range(a.repeats):
        # ABBA order: whichever side runs first in a pair runs measurably slower here, so alternate.
        order = list(sides) if i % 2 == 0 else list(reversed(sides))
        for name in order:
            w, c = sides[name]()
            wall[name].append(samples / w)
            cpu[name].append(samples / c)
        print(
            f"repeat {i + 1}: trainer {wall['trainer'][-1]:.0f} / bare {wall['bare'][-1]:.0f} / "
            "bare2 "
            f"{wall['bare2'][-1]:.0f} samples/s (wall)",
            flush=True,
        )
    print(
        f"tinycnn, digits {a.image_size}x{a.image_size}, batch {a.batch}, {a.steps} steps x "
        f"{a.repeats} repeats, "
        f"{a.threads} thread(s), log every {a.log_every}"
    )
    for label, d in (("wall clock", wall), ("CPU time", cpu)):
        mt, mb = statistics.median(d["trainer"]), statistics.median(d["bare"])
        paired = statistics.median(t / b for t, b in zip(d["trainer"], d["bare"]))
        floor = statistics.median(b2 / b for b2, b in zip(d["bare2"], d["bare"]))
        print(
            f"{label}: trainer median {mt:.0f} | bare loop median {mb:.0f} samples/s | ratio "
            f"{mt / mb:.3f}"
            f" | median of paired ratios {paired:.3f} (target >= 0.97)"
            f" | noise floor bare2/bare {floor:.3f}"
        )


if __name__ == "__main__":
    main()
