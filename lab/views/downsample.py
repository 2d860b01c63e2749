"""Fewer points to draw, same picture: min-max bucket downsampling.

Owns ``minmax``: a trace of any length becomes at most ``max_points``
points by cutting it into equal-count buckets (in index order) and keeping
each bucket's lowest and highest point, in their original order. Spikes
survive, which plain striding would drop. Vectorised with numpy; NaN values
are kept only where a bucket holds nothing else.
"""

from __future__ import annotations

import numpy as np


def minmax(x, y, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) reduced to at most ``max_points`` points keeping every bucket's min and max."""
    x = np.asarray(x)
    y = np.asarray(y)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be 1-D and the same length, got {x.shape} and {y.shape}")
    if max_points < 2:
        raise ValueError(f"max_points must be at least 2, got {max_points}")
    n = len(y)
    if n <= max_points:
        return x, y
    buckets = max_points // 2
    edges = (np.arange(buckets + 1, dtype=np.int64) * n) // buckets
    starts = edges[:-1]
    yf = y.astype(np.float64, copy=False)
    nan = np.isnan(yf)
    lo = np.where(nan, np.inf, yf)
    hi = np.where(nan, -np.inf, yf)
    seg = np.repeat(np.arange(buckets), np.diff(edges))
    idx = np.arange(n)
    # first index in each bucket where the bucket's extreme is reached
    at_min = lo == np.minimum.reduceat(lo, starts)[seg]
    at_max = hi == np.maximum.reduceat(hi, starts)[seg]
    big = n + 1
    amin = np.minimum.reduceat(np.where(at_min, idx, big), starts)
    amax = np.minimum.reduceat(np.where(at_max, idx, big), starts)
    keep = np.unique(np.concatenate([amin, amax]))
    keep = keep[keep < n]
    return x[keep], y[keep]
