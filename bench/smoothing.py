"""Smoothing without scipy: ``lab.views.smoothing.ema_debiased`` against TensorBoard's JS loop
transcribed to Python.

Both compute TensorBoard's debiased EMA bit for bit over the same 200,000-point
series (weight 0.6); they are timed interleaved, 7 rounds, and the ratio of
the medians printed, with the spread. The lab's version is a plain Python
loop over floats plus a numpy debias vector, so it needs numpy alone.

    python bench/smoothing.py [--points 200000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lab.views.smoothing import ema_debiased  # noqa: E402


def tensorboard_js(data: list[float], weight: float) -> list[float]:
    """vz_line_chart2's resmoothDataset, statement by statement."""
    last, n, out = 0.0, 0, []
    for v in data:
        if not math.isfinite(v):
            out.append(v)
            continue
        last = last * weight + (1 - weight) * v
        n += 1
        out.append(last / (1 - math.pow(weight, n)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    v = np.random.default_rng(0).normal(size=a.points) + np.linspace(3, 0, a.points)
    assert np.array_equal(ema_debiased(v, 0.6), np.array(tensorboard_js(v.tolist(), 0.6)))
    ours, js = [], []
    for _ in range(a.rounds):
        t = time.perf_counter()
        ema_debiased(v, 0.6)
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        tensorboard_js(v.tolist(), 0.6)
        js.append(time.perf_counter() - t)
    mo, mj = statistics.median(ours), statistics.median(js)
    print(f"{a.points} points, {a.rounds} interleaved rounds, identical results")
    print(
        f"lab.views.smoothing: median {mo * 1e3:.1f} ms (min {min(ours) * 1e3:.1f}, max "
        f"{max(ours) * 1e3:.1f})"
    )
    print(
        f"TensorBoard JS loop in Python: median {mj * 1e3:.1f} ms (min {min(js) * 1e3:.1f}, max "
        f"{max(js) * 1e3:.1f})"
    )
    print(f"ratio js/lab: {mj / mo:.2f}x")


if __name__ == "__main__":
    main()
