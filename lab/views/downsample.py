"""Fewer points to draw, same picture: min-max downsampling in power-of-two buckets.

Owns ``minmax`` and ``keep_indices``: a trace of any length becomes at most ``max_points``
points by cutting it, in index order, into buckets of the smallest power-of-two size that makes
at most ``max_points // 2`` of them (the last one may be short), and keeping each bucket's lowest
and highest point (their first occurrence), in their original order. Spikes survive, which
plain striding would drop; NaN values are kept only where a bucket holds nothing else.

Buckets of a fixed power-of-two size are blocks that never change once complete: a series
read by ``lab.events`` carries them (``lab.events.blocks``), so a long series' draw reads its
blocks, extended by the points appended since the last draw, plus the short last bucket,
instead of scanning every point; the result is the same points a scan gives. A zoom is a
slice of the series (``keep_indices(values[i:j], ...)``): a plain array, scanned at full
resolution over that range only.
"""

from __future__ import annotations

import numpy as np

from lab.events import blocks as event_blocks


def bucket_shift(n: int, max_points: int) -> int:
    """log2 of the bucket size for ``n`` points drawn as at most ``max_points``."""
    if max_points < 2:
        raise ValueError(f"max_points must be at least 2, got {max_points}")
    buckets = max_points // 2
    shift = 0
    while -(-n // (1 << shift)) > buckets:
        shift += 1
    return shift


def keep_indices(y, max_points: int) -> np.ndarray:
    """The indices of ``y`` that ``minmax`` keeps (sorted)."""
    y = np.asarray(y)
    n = len(y)
    shift = bucket_shift(n, max_points)
    if n <= max_points:
        return np.arange(n)
    size = 1 << shift
    full = n >> shift
    blocks = event_blocks.of(y) if shift >= event_blocks.BASE_SHIFT else None
    if blocks is not None:
        _, amn, _, amx = blocks.level(y, shift)
    else:
        _, amn, _, amx = event_blocks.summarise(y, size)
    parts = [amn, amx]
    if full * size < n:  # the short last bucket, scanned
        _, tmn, _, tmx = event_blocks.summarise(y[full * size :], n - full * size, full * size)
        parts += [tmn, tmx]
    return np.unique(np.concatenate(parts))


def minmax(x, y, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) reduced to at most ``max_points`` points keeping every bucket's min and max."""
    x = np.asarray(x)
    y = np.asarray(y)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be 1-D and the same length, got {x.shape} and {y.shape}")
    if max_points < 2:
        raise ValueError(f"max_points must be at least 2, got {max_points}")
    if len(y) <= max_points:
        return x, y
    keep = keep_indices(y, max_points)
    return x[keep], y[keep]
