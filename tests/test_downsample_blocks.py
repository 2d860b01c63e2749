"""Incremental downsampling (issue 35): a series' power-of-two min/max blocks, extended as points
arrive, give exactly what a full min-max scan of the same series gives, and a draw's cost does
not grow with the series.

Real parts: ``lab.events.columns.Column`` (what the reader keeps per tag) grown in pieces of
random sizes, its snapshots drawn with ``lab.views.downsample.keep_indices``; the reference is
the same function on a plain copy of the values (no blocks: a full scan) and a loop over the
buckets. Work is counted in values scanned (``Blocks.points_read``), not timed.
"""

from __future__ import annotations

import numpy as np
import pytest

from lab.events import blocks as event_blocks
from lab.events.columns import Column
from lab.views import charts
from lab.views.downsample import bucket_shift, keep_indices, minmax


def _loop_reference(y: np.ndarray, max_points: int) -> list[int]:
    n = len(y)
    if n <= max_points:
        return list(range(n))
    size = 1 << bucket_shift(n, max_points)
    keep = set()
    for lo in range(0, n, size):
        seg = y[lo : lo + size]
        keep.add(lo + int(np.argmin(np.where(np.isnan(seg), np.inf, seg))))
        keep.add(lo + int(np.argmax(np.where(np.isnan(seg), -np.inf, seg))))
    return sorted(keep)


def _values(rng, k: int) -> np.ndarray:
    v = rng.normal(size=k)
    v[rng.random(k) < 0.01] = np.nan
    v[rng.random(k) < 0.01] = 3.0  # ties: the first occurrence wins
    if k > 300 and rng.random() < 0.3:
        v[100:300] = np.nan  # a stretch with nothing else
    return v


def _grow(col: Column, rng, k: int) -> None:
    step = np.arange(col.n, col.n + k, dtype=np.int64)
    col.extend(step, step.astype(float), _values(rng, k), presorted=True)


@pytest.mark.parametrize("seed", range(6))
def test_blocks_give_what_a_full_scan_gives_as_the_series_grows(seed):
    rng = np.random.default_rng(seed)
    col = Column()
    _grow(col, rng, event_blocks.REGISTER_MIN + int(rng.integers(0, 5000)))
    for _ in range(12):
        _grow(col, rng, int(rng.choice([1, 7, 63, 64, 65, 1000, int(rng.integers(1, 40_000))])))
        s = col.series()
        assert event_blocks.of(s.value) is col.blocks  # this snapshot reaches its blocks
        for max_points in (2000, int(rng.integers(2, 5000)), 256):
            got = keep_indices(s.value, max_points)
            plain = np.array(s.value)  # a copy: no blocks, scanned whole
            assert event_blocks.of(plain) is None
            assert np.array_equal(got, keep_indices(plain, max_points))
            assert len(got) <= max_points
    assert col.blocks.points_read <= col.n  # each value scanned at most once in all
    assert list(keep_indices(s.value, 700)) == _loop_reference(np.array(s.value), 700)


def test_an_older_snapshot_still_draws_its_own_points():
    rng = np.random.default_rng(7)
    col = Column()
    _grow(col, rng, 40_000)
    old = col.series()
    _grow(col, rng, 30_000)
    new = col.series()
    keep_indices(new.value, 1000)  # extends the blocks past the old snapshot's end
    assert np.array_equal(keep_indices(old.value, 1000), keep_indices(np.array(old.value), 1000))


def test_a_re_sorted_tail_starts_new_blocks_from_the_untouched_part():
    rng = np.random.default_rng(3)
    col = Column()
    _grow(col, rng, 50_000)
    before = col.series()
    keep_indices(before.value, 2000)
    step = np.arange(20_000, 20_100, dtype=np.int64)  # older points from another writer
    col.extend(step, step.astype(float) + 0.5, rng.normal(size=100) * 10)
    after = col.series()
    assert col.blocks is not event_blocks.of(before.value)
    for s in (before, after):
        assert np.array_equal(keep_indices(s.value, 2000), keep_indices(np.array(s.value), 2000))


def test_a_draw_costs_the_new_points_and_the_blocks_drawn_not_the_series():
    rng = np.random.default_rng(11)
    col = Column()
    _grow(col, rng, 1_000_000)
    s = col.series()
    keep_indices(s.value, 2000)  # the first draw scans the series once
    first = col.blocks.points_read
    assert first >= 1_000_000 - 64
    for _ in range(5):
        _grow(col, rng, 10)  # a live refresh: a few steps appended
        s = col.series()
        got = keep_indices(s.value, 2000)
        assert len(got) <= 2000
    # 50 new points: at most one 64-point block more each time, never the series again
    assert col.blocks.points_read - first <= 5 * 64
    assert np.array_equal(got, keep_indices(np.array(s.value), 2000))


def test_charts_convert_only_the_points_drawn():
    col = Column()
    _grow(col, np.random.default_rng(5), 100_000)
    s = col.series()
    x, y = charts.reduce_trace(s.step, s.value, 2000)
    assert x.dtype == float and y.dtype == float and len(x) <= 2000
    rx, ry = minmax(np.asarray(s.step, dtype=float), np.array(s.value), 2000)
    assert np.array_equal(x, rx) and np.array_equal(y, ry, equal_nan=True)


def test_a_zoom_is_a_slice_scanned_at_full_resolution():
    col = Column()
    _grow(col, np.random.default_rng(9), 200_000)
    s = col.series()
    part = s.value[50_000:51_000]  # a range of 1,000 points: every one drawn
    assert event_blocks.of(part) is None
    assert np.array_equal(keep_indices(part, 2000), np.arange(1000))
