"""The verdict rule and the group interval of ``lab.views.compare.verdict``: exact coverage from the
Mann–Whitney counts, checked by simulation against draws of a known distribution; the rule's edges.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from lab.views.compare import verdict as v


@pytest.mark.parametrize(
    ("m", "n", "coverage"),
    [(3, 3, 1 - 2 / math.comb(6, 3)), (2, 2, 1 - 2 / math.comb(4, 2)), (1, 3, 0.5), (1, 1, 0.0)],
)
def test_full_range_coverage_is_exact(m, n, coverage):
    k, c = v.pair_ranks(m, n)
    assert k == 1
    assert c == pytest.approx(coverage)


def test_mann_whitney_counts_sum_to_all_orders():
    for m, n in [(3, 3), (4, 6), (7, 2)]:
        counts = v._u_counts(m, n)
        assert len(counts) == m * n + 1
        assert sum(counts) == math.comb(m + n, m)
        assert counts == counts[::-1]  # symmetric under the null


@pytest.mark.parametrize(("m", "n"), [(3, 3), (2, 2), (5, 5), (3, 5)])
def test_stated_coverage_holds_by_simulation(m, n):
    """4,000 draws of two lognormal groups whose medians differ by a known factor: the share of
    intervals holding that factor is the stated coverage within 2 points."""
    rng = np.random.default_rng(30 + 7 * m + n)
    trials, true_ratio = 4000, 1.25
    a = 100 * rng.lognormal(0.0, 0.1, size=(trials, m))
    b = 100 * true_ratio * rng.lognormal(0.0, 0.1, size=(trials, n))
    hits = 0
    for i in range(trials):
        g = v.compare_groups(a[i], b[i])
        hits += g.low <= true_ratio <= g.high
    stated = v.compare_groups(a[0], b[0]).coverage
    assert abs(hits / trials - stated) <= 0.02, (hits / trials, stated)


def test_heavy_tailed_draws_keep_the_coverage():
    """Distribution-free: the same holds for Student-t noise with 2 degrees of freedom (3×3)."""
    rng = np.random.default_rng(7)
    trials = 4000
    a = 100 * np.exp(0.05 * rng.standard_t(2, size=(trials, 3)))
    b = 80 * np.exp(0.05 * rng.standard_t(2, size=(trials, 3)))
    hits = sum(
        v.compare_groups(a[i], b[i]).low <= 0.8 <= v.compare_groups(a[i], b[i]).high
        for i in range(trials)
    )
    assert abs(hits / trials - 0.9) <= 0.02


def test_the_rule_needs_the_whole_interval_beyond_the_margin():
    assert v.decide(1.11, 1.5) == v.FASTER
    assert v.decide(1.09, 1.5) == v.WITHIN
    assert v.decide(0.5, 1 / 1.1 - 0.001) == v.SLOWER
    assert v.decide(0.5, 0.95) == v.WITHIN
    assert v.decide(0.85, 1.30) == v.WITHIN
    assert v.decide(1.03, 1.28, margin_pct=2.0) == v.FASTER
    assert v.decide(None, 1.0) == ""


def test_compare_groups_median_ratio_and_verdict():
    g = v.compare_groups([100, 101, 99], [80, 81, 79])
    assert g.speedup == pytest.approx(0.8)
    assert (g.low, g.high) == (pytest.approx(79 / 101), pytest.approx(81 / 99))
    assert g.verdict == v.SLOWER
    assert g.coverage_text == "range of 3×3 pairs, 90%"
    assert "90%" in g.text()
    aa = v.compare_groups([100, 110, 95], [104, 97, 108])
    assert aa.verdict == v.WITHIN
    with pytest.raises(ValueError):
        v.compare_groups([], [1.0])


def test_superlinear_efficiency_is_suspect_not_faster():
    assert v.sane(v.FASTER, 1.71) == v.SUSPECT
    assert v.sane(v.FASTER, 1.05) == v.FASTER
    assert v.sane(v.FASTER, 1.71, strong=False) == v.FASTER


def test_margin_of_accepts_numbers_records_and_none():
    assert v.margin_of(None) == v.Margin(10.0, "documented default, 10%")
    assert v.margin_of(4).pct == 4.0
    rec = v.Margin(6.5, "measured on host x, 2 devices")
    assert v.margin_of(rec) == rec


@pytest.mark.parametrize("n", [2, 3, 5, 20])
def test_a_runs_window_interval_states_its_coverage_for_independent_windows(n):
    """One run's order-statistics interval of its median: its stated coverage (e.g. 50% for two
    windows, never called 95%) holds for independent windows, by simulation."""
    from lab.views.compare.spread import median_spread

    rng = np.random.default_rng(n)
    trials, true_median = 4000, 100.0
    draws = true_median * rng.lognormal(0.0, 0.05, size=(trials, n))
    stated = median_spread(draws[0]).coverage
    hits = 0
    for row in draws:
        s = median_spread(row)
        hits += s.ci_low <= true_median <= s.ci_high
    assert abs(hits / trials - stated) <= 0.02, (n, hits / trials, stated)
    if n == 2:
        assert stated == 0.5
    assert v.windows_text(stated * stated, [n, n]).startswith(v.NO_RUN_TO_RUN)
