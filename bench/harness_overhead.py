"""What the trainer's harness costs: its steady samples/s against a bare PyTorch loop.

Both sides train ``tinycnn`` on the digits sample set (the same decoded
tensors, via ``training.data``), same global batch, same number of steps, same
thread count, each in a fresh process so they pay the same start-up and
share the machine the same way. The trainer side is a real
``python -m training.train --mode single`` run; its figure is
``steady_throughput_samples_per_sec`` from summary.json (the first
``min(5, steps // 5)`` steps excluded; validation and checkpoint time are not
in it, since the bare loop does neither). The bare side is the ~20-line loop
in ``bare_loop`` timed the same way. Repeats alternate (trainer, bare,
trainer, bare, ...) so drift in machine load hits both. Prints both medians
and the ratio trainer / bare (target >= 0.97).

    python bench/harness_overhead.py [--repeats 3] [--steps 300] [--batch 64] [--threads 1]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def bare_loop(steps: int, batch: int, image_size: int, seed: int) -> float:
    """Steady samples/s of a plain loop: shuffle, index, forward, backward, step."""
    import torch
    from torch import nn

    sys.path.insert(0, str(REPO))
    from training import data, models

    train = data.load("digits", image_size).train
    images, labels = train.images, train.labels
    torch.manual_seed(seed)
    model = models.build("tinycnn", 1, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(seed)
    excluded, step, t0 = min(5, steps // 5), 0, time.perf_counter()
    while step < steps:
        perm = torch.randperm(len(labels), generator=gen)
        for i in range(0, len(perm) - batch + 1, batch):
            idx = perm[i:i + batch]
            loss = criterion(model(images[idx]), labels[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step == excluded:
                t0 = time.perf_counter()
            if step == steps:
                break
    return (steps - excluded) * batch / (time.perf_counter() - t0)


def run_trainer(steps: int, batch: int, image_size: int, env: dict[str, str]) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-harness-") as tmp:
        cmd = [sys.executable, "-m", "training.train", "--mode", "single", "--device", "cpu", "--log-dir", tmp,
               "--max-steps", str(steps), "--epochs", "1000", "--batch-size", str(batch),
               "--image-size", str(image_size), "--checkpoint", "none"]
        subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True, text=True)
        return json.loads((Path(tmp) / "summary.json").read_text())["steady_throughput_samples_per_sec"]


def run_bare(steps: int, batch: int, image_size: int, env: dict[str, str]) -> float:
    cmd = [sys.executable, __file__, "--bare-once", "--steps", str(steps), "--batch", str(batch),
           "--image-size", str(image_size)]
    out = subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description="trainer vs bare-loop samples/s")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--bare-once", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.bare_once:
        import torch

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        print(bare_loop(a.steps, a.batch, a.image_size, seed=0))
        return
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads), "MKL_NUM_THREADS": str(a.threads)}
    trainer, bare = [], []
    for i in range(a.repeats):
        trainer.append(run_trainer(a.steps, a.batch, a.image_size, env))
        bare.append(run_bare(a.steps, a.batch, a.image_size, env))
        print(f"repeat {i + 1}: trainer {trainer[-1]:.0f} samples/s, bare loop {bare[-1]:.0f} samples/s", flush=True)
    mt, mb = statistics.median(trainer), statistics.median(bare)
    print(f"tinycnn, digits {a.image_size}x{a.image_size}, batch {a.batch}, {a.steps} steps, {a.threads} thread(s)")
    print(f"trainer median {mt:.0f} samples/s | bare loop median {mb:.0f} samples/s | ratio {mt / mb:.3f} (target >= 0.97)")


if __name__ == "__main__":
    main()
