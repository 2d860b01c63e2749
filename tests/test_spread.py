"""lab.views.compare.spread: medians, order-statistics intervals, ratios and the "within noise"
verdict."""

from __future__ import annotations

import math
import random

import pytest

from lab.views.compare.spread import (
    Spread,
    median_spread,
    order_ranks,
    over_repeats,
    ratio,
    steady_windows,
)


def test_order_ranks_match_the_binomial_table():
    # the textbook 95% ranks for the median: n=6 -> (1, 6), n=9 -> (2, 8), n=20 -> (6, 15), n=100 ->
    # (40, 61)
    assert order_ranks(6)[0] == 1 and order_ranks(6)[1] == pytest.approx(1 - 2 / 64)
    assert order_ranks(9)[0] == 2
    assert order_ranks(20)[0] == 6
    assert order_ranks(100)[0] == 40
    for n in range(6, 200):
        k, cov = order_ranks(n)
        assert cov >= 0.95, n
        assert order_ranks(n)[0] == k and (
            k == 1 or 1 - 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n < 0.95
        )


def test_order_ranks_of_long_runs_are_exact_and_fast():
    """The CDF summed as k grows gives the definition's answer, in exact fractions; and a run of
    thousands of logging windows works (2.0**n overflowed past 1,023 windows)."""
    from fractions import Fraction

    def by_definition(n: int) -> tuple[int, Fraction]:
        cdf = [Fraction(sum(math.comb(n, i) for i in range(k + 1)), 2**n) for k in range(n + 1)]
        k = 1
        while k + 1 <= (n + 1) // 2 and cdf[k] <= Fraction(1 - 0.95) / 2:
            k += 1
        return k, 1 - 2 * cdf[k - 1]

    for n in (*range(2, 120), 257, 600):
        k, cov = by_definition(n)
        assert order_ranks(n)[0] == k and order_ranks(n)[1] == pytest.approx(float(cov), abs=1e-12)
    k, cov = order_ranks(5000)
    assert 0.95 <= cov < 0.96 and abs(k - (2500 - 1.96 * math.sqrt(5000) / 2)) < 3


def test_few_windows_give_the_whole_range_and_say_what_it_covers():
    s = median_spread([3.0, 1.0, 2.0])
    assert (s.median, s.ci_low, s.ci_high, s.windows) == (2.0, 1.0, 3.0, 3)
    assert s.coverage == pytest.approx(0.75)  # 1 - 2 * 0.5**3
    assert median_spread([]) is None
    assert median_spread([float("nan"), 5.0]).median == 5.0


def test_interval_covers_the_true_median_about_95_percent_of_the_time():
    rng = random.Random(7)
    hits = 0
    for _ in range(2000):
        s = median_spread([rng.gauss(100, 10) for _ in range(30)])
        hits += s.ci_low <= 100 <= s.ci_high
    assert 0.93 <= hits / 2000 <= 0.99


def test_steady_windows_drop_the_warm_up_window():
    assert steady_windows([20, 10, 30], [5.0, 1.0, 6.0]) == [5.0, 6.0]
    assert steady_windows([10], [1.0]) == [1.0]


def test_ratio_interval_and_verdict():
    a = Spread(200.0, 190.0, 210.0, 20, 0.96)
    b = Spread(100.0, 95.0, 105.0, 20, 0.96)
    r = ratio(a, b)
    assert (
        r.value == 2.0
        and r.ci_low == pytest.approx(190 / 105)
        and r.ci_high == pytest.approx(210 / 95)
    )
    assert r.within_noise  # 1.81x-2.21x, yet one run each makes no claim (verdict.one_run_each)
    same = ratio(Spread(101.0, 96.0, 104.0, 20, 0.96), b)
    assert same.within_noise and same.text() == "1.01× (0.91–1.09)"
    assert ratio(a, None) is None
    eff = r.scaled(0.5)
    assert eff.value == 1.0 and eff.within_noise is True


def test_over_repeats():
    assert over_repeats([10.0, 12.0, 11.0]) == {
        "median": 11.0,
        "min": 10.0,
        "max": 12.0,
        "repeats": 3,
        "spread_pct": pytest.approx(100 * 2 / 11),
    }
    assert over_repeats([]) is None


def test_one_run_against_one_run_is_never_claimed():
    """Identical quiet pairs measured 1.05x (1.01-1.10), 1.33x (1.20-1.48) and 0.71x (0.60-0.80)
    here: the windows of one run each say nothing of how whole runs shift, so no interval of one
    run against one run is faster or slower, however far it lies from 1.0."""
    base = Spread(100.0, 99.0, 101.0, 30, 0.95)
    for run in (Spread(105.0, 102.0, 109.0, 30, 0.95), Spread(133.0, 121.0, 149.0, 30, 0.95)):
        assert ratio(run, base).within_noise
    assert ratio(Spread(71.0, 61.0, 80.0, 30, 0.95), base).within_noise
