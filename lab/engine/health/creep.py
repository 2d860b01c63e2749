"""Whether a run's memory keeps rising after warm-up instead of levelling off: the rule behind the
``memory_creep`` finding (``lab.engine.health.rules``), on one series of (seconds, MiB) samples.

Healthy memory rises in the first steps (torch's libraries, the allocator's pools, the data
loader's workers, the first validation) and then levels off; memory that keeps growing is tensors
that are not freed. The rule is built so that a healthy run is not flagged:

- **Warm-up left out**: samples in the first ``WARMUP_S`` seconds or the first ``WARMUP_SHARE`` of
  the run so far, whichever is longer (a slow start-up on a busy machine is still warm-up).
- **Enough to judge**: at least ``MIN_SAMPLES`` samples over ``MIN_WINDOW_S`` seconds after it.
- **A trend, not a point**: the least-squares slope over that whole window (robust to one spike,
  unlike first-to-last), in MiB per minute.
- **Big in both senses**: at least ``MIN_SLOPE_MIB_MIN`` (a few MiB per minute of allocator or
  event-buffer drift is not a leak) *and* a rise over the window of at least ``MIN_RISE_SHARE`` of
  the memory at its start (16 MiB/min means little on a 70 GiB GPU over a minute, a lot on RSS).
- **Monotone-ish**: the rise stands ``RISE_SIGMAS`` times above the scatter of the samples around
  the line, so a flat but noisy series (workers restarting every epoch, NVML's rounding) is not a
  slope by chance.
- **Still rising**: the window's second half has a slope of at least ``MIN_SLOPE_MIB_MIN`` and half
  the whole window's; memory that rose and then levelled off is not flagged.

Pure: no file, no clock; ``creep(points)`` returns the evidence or None.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

WARMUP_S = 10.0
WARMUP_SHARE = 1 / 3
MIN_SAMPLES = 10
MIN_WINDOW_S = 20.0
MIN_SLOPE_MIB_MIN = 16.0
MIN_RISE_SHARE = 0.05
RISE_SIGMAS = 3.0
KEEP = 4000  # samples a watch keeps per series; beyond it, every other one is dropped


def _fit(t: np.ndarray, v: np.ndarray) -> tuple[float, float, float]:
    """(slope per second, intercept, residual standard deviation) of the least-squares line."""
    slope, icept = np.polyfit(t, v, 1)
    resid = v - (slope * t + icept)
    return float(slope), float(icept), float(np.std(resid))


def creep(points: Sequence[tuple[float, float]]) -> dict[str, Any] | None:
    """Evidence of memory still rising after warm-up in ``points`` ((seconds, MiB), oldest first),
    or None."""
    if len(points) < MIN_SAMPLES:
        return None
    a = np.asarray(points, dtype=float)
    t, v = a[:, 0] - a[0, 0], a[:, 1]
    warm = max(WARMUP_S, WARMUP_SHARE * t[-1])
    keep = t >= warm
    t, v = t[keep], v[keep]
    if len(t) < MIN_SAMPLES or t[-1] - t[0] < MIN_WINDOW_S:
        return None
    slope, icept, scatter = _fit(t, v)
    window = float(t[-1] - t[0])
    rise = slope * window
    start = max(slope * t[0] + icept, 1.0)
    half = t >= t[0] + window / 2
    late = _fit(t[half], v[half])[0] * 60 if half.sum() >= MIN_SAMPLES // 2 else 0.0
    per_min = slope * 60
    if (
        per_min < MIN_SLOPE_MIB_MIN
        or rise < MIN_RISE_SHARE * start
        or rise < RISE_SIGMAS * scatter
        or late < max(MIN_SLOPE_MIB_MIN, per_min / 2)
    ):
        return None
    return {
        "slope_mib_per_min": round(per_min, 1),
        "late_slope_mib_per_min": round(late, 1),
        "rise_mib": round(rise, 1),
        "window_s": round(window, 1),
        "from_mib": round(float(v[0]), 1),
        "to_mib": round(float(v[-1]), 1),
        "samples": int(len(t)),
    }


def thin(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``points`` kept to at most ``KEEP``: every other one dropped, the newest kept."""
    return points[::-1][::2][::-1] if len(points) > KEEP else points
