"""summary.json's ``throughput``: the median of the steady logging windows and a 95% interval of it.

The trainer logs ``perf/samples_per_sec`` once per logging window; this
module turns those windows (the first one dropped as warm-up, unless it is
the only one, and under ``--compile on`` every window during which a graph
compiled: ``compiled``, summary.json's ``compile_windows``) into
``{"median", "ci_low", "ci_high", "windows"}``. The
interval is the distribution-free one of order statistics: between the k-th
smallest and the k-th largest window, k the largest rank whose two-sided
binomial tail (p = 1/2) stays under 5%; with too few windows it is the whole
range. It is the same arithmetic as ``lab.views.compare.spread`` (median_spread of
steady_windows), written again because the trainer never imports the lab;
tests/test_train_throughput.py checks that both give the same figures on a
real run's own events.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

LEVEL = 0.95


def _binom_cdf(k: int, n: int) -> float:
    """P(B <= k) for B ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n


def _rank(n: int) -> int:
    """k such that [x_(k), x_(n-k+1)] (1-based) covers the median with at least LEVEL (or k=1)."""
    k = 1
    while k + 1 <= (n + 1) // 2 and _binom_cdf(k, n) <= (1 - LEVEL) / 2:
        k += 1
    return k


def window_spread(
    windows: Sequence[tuple[int, float]], compiled: Collection[int] = ()
) -> dict[str, float | int] | None:
    """The steady windows' median samples/s and its 95% interval; None without a finite window.

    ``windows`` are ``(step, samples/s)`` pairs, one per logging window; ``compiled`` the steps
    closing the windows during which a graph compiled, left out (None when only they remain).
    """
    pairs = sorted((int(s), float(r)) for s, r in windows)
    steady = pairs[1:] if len(pairs) > 1 else pairs  # the first window holds the warm-up
    skip = {int(s) for s in compiled}
    xs = sorted(r for s, r in steady if math.isfinite(r) and s not in skip)
    n = len(xs)
    if n == 0:
        return None
    mid = n // 2
    median = xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2
    k = _rank(n)
    return {"median": median, "ci_low": xs[k - 1], "ci_high": xs[n - k], "windows": n}
