"""How sure a throughput or a speedup is: medians with distribution-free intervals.

A run's steady throughput is the median of its logging windows (the first dropped as warm-up) with
an interval of the median from order statistics (binomial ranks: 95% if the windows were
independent, which they are not; the whole range, and its real coverage, with too few windows). A
speedup of one run over another divides two medians, its interval the ends of the two intervals,
its verdict ``verdict.one_run_each`` (``within_noise``): within-run windows only, no run-to-run
evidence, so never faster or slower.
Groups of runs are compared by ``verdict.compare_groups``. No randomness, no scipy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from lab.views.compare.verdict import WITHIN, one_run_each

LEVEL = 0.95


@dataclass(frozen=True)
class Spread:
    """A median with its interval; ``windows`` values went into it."""

    median: float
    ci_low: float
    ci_high: float
    windows: int
    coverage: float  # what the interval really covers (>= LEVEL, or less with few windows)

    def to_json(self) -> dict[str, float | int]:
        return asdict(self)


@dataclass(frozen=True)
class Ratio:
    """A speedup (or any ratio of medians) with its interval and the verdict."""

    value: float
    ci_low: float
    ci_high: float
    within_noise: bool

    def to_json(self) -> dict[str, float | bool]:
        return asdict(self)

    def scaled(self, factor: float) -> Ratio:
        """The same ratio times ``factor`` (efficiency = speedup / devices); the verdict is kept."""
        return Ratio(
            self.value * factor, self.ci_low * factor, self.ci_high * factor, self.within_noise
        )

    def text(self, digits: int = 2) -> str:
        return f"{self.value:.{digits}f}× ({self.ci_low:.{digits}f}–{self.ci_high:.{digits}f})"


def _binom_cdf(k: int, n: int) -> float:
    """P(B <= k) for B ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n


@functools.lru_cache(maxsize=1024)
def order_ranks(n: int, level: float = LEVEL) -> tuple[int, float]:
    """(k, coverage): the interval [x_(k), x_(n-k+1)] (1-based) covers the median with
    ``coverage``.

    The binomial CDF is summed as k grows, one term at a time (exact integers): a run of a few
    thousand logging windows costs O(n), where summing each CDF afresh cost O(n²) big-integer
    terms, a quarter of a second on Compare's first screen. Cached: runs share their counts.
    """
    if n < 2:
        return 1, 1 - 2 * _binom_cdf(0, n)
    if n > EXACT_MAX:
        return _order_ranks_float(n, level)
    total, tail = 2**n, (1 - level) / 2
    k, term = 1, n  # term: C(n, k)
    below = 1 + n  # sum of C(n, i) for i <= k
    while k + 1 <= (n + 1) // 2 and below / total <= tail:
        k += 1
        term = term * (n - k + 1) // k
        below += term
    return k, 1 - 2 * ((below - term) / total)


EXACT_MAX = 4096  # beyond, exact integers cost O(n^2): a million windows took minutes


def _order_ranks_float(n: int, level: float) -> tuple[int, float]:
    """``order_ranks`` in floating point, vectorised: the binomial terms from the log of their
    ratios (C(n, k) / C(n, k - 1) = (n - k + 1) / k), the tail's CDF their running sum. Terms
    below 2**-1074 vanish, and count for nothing at a 2.5 % tail."""
    top = (n + 1) // 2
    k = np.arange(1, top + 1, dtype=np.float64)
    log_terms = np.concatenate([[0.0], np.cumsum(np.log((n - k + 1) / k))]) - n * math.log(2)
    cdf = np.cumsum(np.exp(log_terms))  # cdf[i] = P(B <= i), i = 0..top
    over = np.flatnonzero(cdf[1:] > (1 - level) / 2)
    ranks = int(over[0]) + 1 if len(over) else top
    return ranks, float(1 - 2 * cdf[ranks - 1])


def median_spread(values: Sequence[float], level: float = LEVEL) -> Spread | None:
    """Median and its order-statistics interval of the finite ``values``; None when there are
    none."""
    a = np.asarray(values if len(values) else [], dtype=np.float64)  # None -> NaN: left out
    xs = np.sort(a[np.isfinite(a)]).tolist()
    n = len(xs)
    if n == 0:
        return None
    mid = n // 2
    median = xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2
    k, coverage = order_ranks(n, level)
    return Spread(median, xs[k - 1], xs[n - k], n, round(coverage, 4))


def steady_windows(
    steps: Sequence[float], rates: Sequence[float], compiled: Collection[float] = ()
) -> list[float]:
    """The logging windows' rates without the first window (warm-up), unless it is the only one,
    nor those closed at a step of ``compiled`` (a trainer run's summary.json ``compile_windows``:
    a graph compiled during them)."""
    s, r = np.asarray(steps, dtype=np.float64), np.asarray(rates, dtype=np.float64)
    order = np.lexsort((r, s))  # by step, then rate: as sorting the pairs does
    s, r = s[order], r[order]
    s, r = (s[1:], r[1:]) if len(r) > 1 else (s, r)
    return r[~np.isin(s, np.asarray(list(compiled), dtype=np.float64))].tolist()


def ratio(run: Spread | None, baseline: Spread | None) -> Ratio | None:
    """``run.median / baseline.median`` with the interval of ratios of medians inside both
    intervals."""
    if run is None or baseline is None or baseline.median <= 0 or baseline.ci_low <= 0:
        return None
    lo, hi = run.ci_low / baseline.ci_high, run.ci_high / baseline.ci_low
    return Ratio(run.median / baseline.median, lo, hi, one_run_each(lo, hi) == WITHIN)


def over_repeats(medians: Sequence[float]) -> dict[str, float | int] | None:
    """One mode's repeats: the median of their medians, the range across them and how many."""
    xs = sorted(float(m) for m in medians if m is not None and math.isfinite(float(m)))
    if not xs:
        return None
    n, mid = len(xs), len(xs) // 2
    med = xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2
    return {
        "median": med,
        "min": xs[0],
        "max": xs[-1],
        "repeats": n,
        "spread_pct": 100 * (xs[-1] - xs[0]) / med if med else 0.0,
    }
