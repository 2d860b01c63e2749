"""Compare's intervals on a week-long run (issue 35): a million logging windows give the same
ranks as the exact binomial sum, in well under a second (the exact big-integer sum took minutes
on Compare's first visit)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from lab.views.compare import spread


@pytest.mark.parametrize("n", [2, 3, 50, 101, 1000, 4096, 4097, 6000])
def test_float_ranks_are_the_exact_ranks(n, monkeypatch):
    fast = spread._order_ranks_float(n, spread.LEVEL)
    monkeypatch.setattr(spread, "EXACT_MAX", 10**9)
    exact = spread.order_ranks.__wrapped__(n)
    assert fast[0] == exact[0] and fast[1] == pytest.approx(exact[1], abs=1e-9)


def test_a_million_windows_cost_about_ten_times_a_hundred_thousand():
    # the cost grows as n log n, not n^2 (the exact big-integer sum took minutes at a million):
    # timed against a tenth of the series in the same process, the machine's noise cancels
    rng = np.random.default_rng(0)
    rates = rng.normal(100.0, 5.0, 1_000_000)
    steps = np.arange(len(rates), dtype=float)

    def timed(n: int) -> tuple[float, spread.Spread]:
        t = time.perf_counter()
        s = spread.median_spread(spread.steady_windows(steps[:n], rates[:n]))
        return time.perf_counter() - t, s

    small = min(timed(100_000)[0] for _ in range(3))
    took, s = min((timed(1_000_000) for _ in range(2)), key=lambda x: x[0])
    assert took < 40 * small and took < 20.0, f"{took:.2f} s against {small:.3f} s"  # n^2: 100x
    assert s.windows == 999_999 and s.ci_low < s.median < s.ci_high
    assert s.median == pytest.approx(np.median(rates[1:]))
    assert 0.95 <= s.coverage < 0.951


def test_none_and_nan_are_left_out_and_order_is_by_step():
    assert spread.median_spread([None, float("nan"), 3.0, 1.0, 2.0]).median == 2.0
    assert spread.steady_windows([3, 1, 2], [30.0, 10.0, 20.0]) == [20.0, 30.0]
