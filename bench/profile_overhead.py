"""What ``--profile-steps`` costs outside its window: samples/s after the window against the same
run unprofiled.

Three sides train ``tinycnn`` on the digits sample set in this one process,
with the trainer's real ``training.loop.Loop`` and Recorder (``--mode single``,
same seed, batch, steps and thread count): ``profiled`` with
``--profile-steps A:B``, ``plain`` without, and ``plain2``, a second unprofiled
run whose ratio to ``plain`` is this machine's noise floor. Each step's end is
stamped through the loop's ``stop`` callback (polled after every step), and
only the steps after the window are timed, from the end of step B-1 (the
window's trace and breakdown written) to the last step: what a run pays for
the profiler where it does not profile. Sides run interleaved in ABBA order
(whichever goes first in a round runs slower here), after one uncounted
warm-up round. Prints each side's median and spread (min-max) of samples/s,
by wall clock and by this process's CPU time, and the medians of the paired
ratios profiled / plain and plain2 / plain (target: within the noise floor).
Both run sides call the loop's profiler hooks, which outside the window hand
back a shared ``nullcontext``; their own cost is timed apart (``timeit`` of
one step's hooks) and printed as a share of a plain step.

    python bench/profile_overhead.py [--repeats 6] [--steps 120] [--window 5:10] [--batch 64]
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


def timed_run(
    bundle, steps: int, batch: int, window: str | None, after: int
) -> tuple[float, float]:
    """Samples/s (wall, CPU) of the steps after step ``after``; ``window`` profiles (None: not)."""
    import torch

    from training import models
    from training.cli import build_parser
    from training.distributed import place
    from training.loop import Loop
    from training.metrics import Recorder

    stamps: list[tuple[float, float]] = []

    def stamp() -> bool:
        stamps.append((time.perf_counter(), time.process_time()))
        return False

    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        argv = [
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
            "--log-every",
            "10",
            "--checkpoint",
            "none",
        ]
        args = build_parser().parse_args(argv + (["--profile-steps", window] if window else []))
        torch.manual_seed(0)
        model = models.build("tinycnn", bundle.channels, bundle.num_classes)
        recorder = Recorder(Path(tmp), enabled=True)
        recorder.open()
        Loop(args, place("single", "cpu", batch), bundle, model, recorder, None, stop=stamp).run()
        recorder.close()
        if window and not (Path(tmp) / "profile" / "breakdown.json").is_file():
            raise SystemExit("the profiled side wrote no breakdown.json: it did not profile")
    (w0, c0), (w1, c1) = stamps[after - 1], stamps[-1]
    samples = (len(stamps) - after) * batch
    return samples / (w1 - w0), samples / (c1 - c0)


def hook_cost_us(steps: int) -> float:
    """Microseconds a step spends in the loop's profiler hooks outside the window (best of 5 timeit
    rounds)."""
    import timeit

    from training.cli import build_parser
    from training.distributed import place
    from training.profiling import StepProfiler

    args = build_parser().parse_args(["--log-dir", "unused", "--profile-steps", "5:10"])
    prof = StepProfiler(
        args, place("single", "cpu", 64), Path("unused"), first_step=0, last_step=steps
    )

    def one_step() -> None:  # what Loop.train_one_epoch/_train_step call per step
        with prof.step(steps):
            with prof.phase("data"):
                pass
            with prof.phase("forward"):
                pass
            with prof.phase("optimizer"):
                pass
            with prof.phase("backward"):
                pass
            with prof.phase("optimizer"):
                pass
        prof.due(steps)

    n = 20_000
    return min(timeit.repeat(one_step, number=n, repeat=5)) / n * 1e6


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.0f} (min {min(values):.0f}, max {max(values):.0f})"


def main() -> None:
    p = argparse.ArgumentParser(
        description="samples/s after a --profile-steps window vs unprofiled, interleaved"
    )
    p.add_argument("--repeats", type=int, default=6)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--window", default="5:10")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch

    from training import data
    from training.cli import parse_window

    torch.set_num_threads(a.threads)
    bundle = data.load("digits", a.image_size)
    # validation is not overhead
    bundle.val = data.TensorImages(bundle.train.images[:0], bundle.train.labels[:0])
    # timing starts at the end of step B-1, the window written
    after = parse_window(a.window)[1] - 1
    sides = {
        "profiled": lambda: timed_run(bundle, a.steps, a.batch, a.window, after),
        "plain": lambda: timed_run(bundle, a.steps, a.batch, None, after),
        "plain2": lambda: timed_run(bundle, a.steps, a.batch, None, after),
    }
    # warm-up round: first-call costs (allocator, autograd, kineto) not counted
    for fn in sides.values():
        fn()
    wall: dict[str, list[float]] = {k: [] for k in sides}
    cpu: dict[str, list[float]] = {k: [] for k in sides}
    for i in range(a.repeats):
        for name in list(sides) if i % 2 == 0 else list(reversed(sides)):
            w, c = sides[name]()
            wall[name].append(w)
            cpu[name].append(c)
        print(
            f"repeat {i + 1}: "
            + " / ".join(f"{k} {wall[k][-1]:.0f}" for k in sides)
            + " samples/s (wall)",
            flush=True,
        )
    print(
        f"tinycnn, digits {a.image_size}x{a.image_size}, batch {a.batch}, {a.steps} steps, window "
        f"{a.window}, "
        f"timed after it; {a.repeats} repeats, {a.threads} thread(s)"
    )
    hooks = hook_cost_us(a.steps)
    plain_us = 1e6 * a.batch / statistics.median(wall["plain"])
    print(
        f"profiler hooks outside the window: {hooks:.2f} us a step = "
        f"{100 * hooks / plain_us:.3f}% of a plain "
        f"step ({plain_us / 1000:.2f} ms)"
    )
    for label, d in (("wall clock", wall), ("CPU time", cpu)):
        paired = statistics.median(x / y for x, y in zip(d["profiled"], d["plain"]))
        floor = statistics.median(x / y for x, y in zip(d["plain2"], d["plain"]))
        print(
            f"{label}: profiled {spread(d['profiled'])} | plain {spread(d['plain'])} samples/s | "
            "ratio of medians "
            f"{statistics.median(d['profiled']) / statistics.median(d['plain']):.3f} | "
            f"median of paired ratios {paired:.3f} | noise floor plain2/plain {floor:.3f}"
        )


if __name__ == "__main__":
    main()
