"""lab.views.downsample.minmax: at most max_points, every bucket's min and max kept, in order.

Buckets are of the smallest power-of-two size making at most max_points // 2 of them."""

from __future__ import annotations

import numpy as np
import pytest

from lab.views.downsample import minmax


def reference(x, y, max_points):
    """The same buckets, by plain loops: first index of each bucket's min and max."""
    n, buckets = len(y), max_points // 2
    size = 1
    while -(-n // size) > buckets:
        size *= 2
    keep = set()
    for lo in range(0, n, size):
        hi = min(lo + size, n)
        seg = [(np.inf if np.isnan(v) else v) for v in y[lo:hi]]
        keep.add(lo + int(np.argmin(seg)))
        seg = [(-np.inf if np.isnan(v) else v) for v in y[lo:hi]]
        keep.add(lo + int(np.argmax(seg)))
    idx = sorted(keep)
    return x[idx], y[idx]


@pytest.mark.parametrize("n,max_points", [(10_001, 100), (1000, 999), (5000, 2), (333, 64)])
def test_matches_loop_reference(n, max_points):
    rng = np.random.default_rng(n)
    x = np.cumsum(rng.random(n))
    y = rng.normal(size=n)
    y[rng.integers(0, n, 5)] = np.nan
    gx, gy = minmax(x, y, max_points)
    rx, ry = reference(x, y, max_points)
    assert len(gx) <= max_points
    assert np.array_equal(gx, rx) and np.array_equal(gy, ry, equal_nan=True)
    assert np.all(np.diff(gx) > 0)  # original order


def test_spikes_survive_and_short_traces_are_untouched():
    y = np.zeros(100_000)
    y[12_345] = 50.0
    y[99_999] = -7.0
    x = np.arange(len(y))
    gx, gy = minmax(x, y, 500)
    assert (
        len(gx) <= 500 and 12_345 in gx and 99_999 in gx and gy.max() == 50.0 and gy.min() == -7.0
    )
    sx, sy = minmax([1, 2, 3], [3.0, 2.0, 1.0], 10)
    assert list(sx) == [1, 2, 3] and list(sy) == [3.0, 2.0, 1.0]


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="at least 2"):
        minmax([1, 2, 3], [1, 2, 3], 1)
    with pytest.raises(ValueError, match="same length"):
        minmax([1, 2, 3], [1, 2], 10)
