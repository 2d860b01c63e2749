"""The one verdict rule of Compare, and the interval it reads: group B against group A.

``compare_groups(a, b, margin_pct)`` takes two groups' throughputs (one per run: each run's
steady-state median) and returns the speedup of B over A as the ratio of the group medians, with a
distribution-free interval over the pairs of runs: the Hodges–Lehmann interval of the shift of log
throughput, i.e. order statistics of the m×n pairwise ratios b_j / a_i, cut at ranks from the exact
Mann–Whitney distribution. Its coverage is exact (under a shift of the log throughput, no
assumption on the distribution) and is stated, never rounded up: for 3×3 runs the full range of the
9 ratios covers 1 − 2/C(6,3) = 90%; 2×2 covers 67%; 1×3 covers 50%.

``decide`` is the verdict every rendering uses (cards, table rows, JSON, text, HTML): *faster* only
when the whole interval lies above 1 + m, *slower* only when it lies below 1 / (1 + m), else
*within noise*; m is the noise margin (the machine's measured run-to-run noise where known, else
the documented 10%). One run against one run has no run-to-run evidence and makes no claim
(``one_run_each``: within noise). A strong-scaling efficiency above ``SUPERLINEAR`` (1.1) is not
believed: ``SUSPECT`` instead of a colour, with its likely causes.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

BASELINE, WITHIN, FASTER, SLOWER = "baseline", "within noise", "faster", "slower"
SUSPECT = "check: superlinear"
LEVEL = 0.90  # the coverage an interval aims at; what it really has is stated beside it
DEFAULT_MARGIN_PCT = 10.0
DEFAULT_SOURCE = "documented default, 10%"
SUPERLINEAR = 1.1  # strong-scaling efficiency above this is flagged, never shown green
SUPERLINEAR_CAUSES = (
    "efficiency above 1.1 under strong scaling means the runs did different work: check for "
    "different work per step (a script that ignores the lab's batch or devices), a slowed "
    "baseline (a busy machine, a baseline run that was itself several processes), or "
    "oversubscribed threads (more threads than cores in the baseline)"
)
TOO_FEW_RUNS = "too few runs for a verdict: repeat each side at least 3 times"
NO_RUN_TO_RUN = "within-run windows only, no run-to-run evidence"
ONE_EACH = f"{NO_RUN_TO_RUN}; {TOO_FEW_RUNS}"  # a speedup of one run over one run
_EXACT_LIMIT = (
    60  # m + n up to this: the exact Mann–Whitney counts; above, the normal approximation
)


@dataclass(frozen=True)
class Margin:
    """The noise margin in percent and where it comes from, in words."""

    pct: float = DEFAULT_MARGIN_PCT
    source: str = DEFAULT_SOURCE


def margin_of(margin: Any = None) -> Margin:
    """A ``Margin`` from None (the documented default), a number (percent) or anything with ``pct``
    and ``source`` (the engine's noise record)."""
    if margin is None:
        return Margin()
    if isinstance(margin, (int, float)):
        return Margin(float(margin), f"given, {float(margin):g}%")
    return Margin(float(margin.pct), str(margin.source))


@dataclass(frozen=True)
class Margins:
    """The margin for each device count: a lookup ``(host, devices) -> Margin-like | None`` (the
    engine's latest measured noise for that host and count), else ``fixed``."""

    fixed: Margin = field(default_factory=Margin)
    lookup: Callable[[str | None, int], Any] | None = None
    host: str | None = None
    _seen: dict = field(default_factory=dict, compare=False, repr=False)

    def at(self, devices: int) -> Margin:
        """The margin for ``devices``: the lookup's where it has one, else ``fixed``."""
        if self.lookup is None:
            return self.fixed
        if devices not in self._seen:
            found = self.lookup(self.host, int(devices))
            self._seen[devices] = self.fixed if found is None else margin_of(found)
        return self._seen[devices]


def margins_of(margin: Any = None, host: str | None = None) -> Margins:
    """``Margins`` from None (the documented 10%), a percent, a ``Margin``-like (``pct``,
    ``source``), a callable ``(host, devices) -> Margin-like | None``, or ``Margins`` as is."""
    if isinstance(margin, Margins):
        return margin
    if callable(margin) and not hasattr(margin, "pct"):
        return Margins(lookup=margin, host=host)
    return Margins(fixed=margin_of(margin))


def noise_band(margin_pct: float) -> tuple[float, float]:
    """The speedups that read as *within noise* on their own: [1 / (1 + m), 1 + m]."""
    m = max(0.0, float(margin_pct)) / 100
    return 1 / (1 + m), 1 + m


def decide(low: float | None, high: float | None, margin_pct: float = DEFAULT_MARGIN_PCT) -> str:
    """THE verdict: ``faster`` when the whole interval [low, high] lies above 1 + m, ``slower``
    when it lies below 1 / (1 + m), else ``within noise``; "" without an interval."""
    if low is None or high is None:
        return ""
    lo_band, hi_band = noise_band(margin_pct)
    if low > hi_band:
        return FASTER
    if high < lo_band:
        return SLOWER
    return WITHIN


def one_run_each(low: float | None, high: float | None) -> str:
    """THE verdict of one run against one run: *within noise* whatever its interval ("" without
    one). The interval is the runs' logging windows, which see the noise within a run only, and
    whole runs shift: in A/A runs here identical pairs on a quiet machine measured 1.33×
    (1.20–1.48) and 0.71× (0.60–0.80), and identical runs differed by up to 2.5× in the
    calibration runs (docs/benchmarks.md). No margin makes "faster" from one pair wrong at most 1
    time in 20; as for 2×2 runs (``compare_groups``), too few runs make no claim."""
    return "" if low is None or high is None else WITHIN


def sane(verdict: str, efficiency: float | None, strong: bool = True) -> str:
    """``verdict`` unless a strong-scaling efficiency above ``SUPERLINEAR`` makes it ``SUSPECT``
    (``strong``: the group scales the baseline's work over more devices)."""
    if strong and efficiency is not None and efficiency > SUPERLINEAR and verdict != BASELINE:
        return SUSPECT
    return verdict


@functools.lru_cache(maxsize=256)
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """How many of the C(m+n, m) rank orders give each Mann–Whitney U = 0..m·n (no ties)."""
    # counts[j][u] for the current i: arrangements of i a's and j b's with U = u
    prev = [[1] for _ in range(n + 1)]  # i = 0: one arrangement, U = 0
    for i in range(1, m + 1):
        cur = [[1]]  # j = 0
        for j in range(1, n + 1):
            size = i * j + 1
            row = [0] * size
            for u, c in enumerate(cur[j - 1]):  # the largest is a b: adds nothing
                row[u] += c
            for u, c in enumerate(prev[j]):  # the largest is an a: it beats all j b's
                row[u + j] += c
            cur.append(row)
        prev = cur
    return tuple(prev[n])


def _lower_tail(m: int, n: int, k: int) -> float:
    """P(U <= k) under the null (exact for small groups, else the normal approximation)."""
    if m + n <= _EXACT_LIMIT:
        counts = _u_counts(m, n)
        return sum(counts[: k + 1]) / math.comb(m + n, m)
    mu, sd = m * n / 2, math.sqrt(m * n * (m + n + 1) / 12)
    return 0.5 * math.erfc(-((k + 0.5 - mu) / sd) / math.sqrt(2))


@functools.lru_cache(maxsize=256)
def pair_ranks(m: int, n: int, level: float = LEVEL) -> tuple[int, float]:
    """(k, coverage): the k-th smallest and k-th largest of the m·n pairwise ratios bound an
    interval of exact ``coverage``; the largest k whose coverage is at least ``level``, else k = 1
    (the full range) with the coverage it has."""
    k, coverage = 1, 1 - 2 * _lower_tail(m, n, 0)
    while k + 1 <= (m * n + 1) // 2:
        c = 1 - 2 * _lower_tail(m, n, k)
        if c < level:
            break
        k, coverage = k + 1, c
    return k, coverage


def coverage_text(m: int, n: int, coverage: float) -> str:
    """The interval's name with its real coverage: ``"range of 3×3 pairs, 90%"``."""
    pct = f"{100 * coverage:.0f}%"
    k, _ = pair_ranks(m, n)
    if k == 1:
        return f"range of {m}×{n} pairs, {pct}"
    return f"{pct} interval over {m}×{n} pairs"


@dataclass(frozen=True)
class GroupComparison:
    """Group B against group A: speedup (ratio of medians), its interval, the interval's exact
    coverage and name, the verdict under the margin."""

    speedup: float
    low: float
    high: float
    coverage: float
    verdict: str
    coverage_text: str
    runs_a: int
    runs_b: int
    margin_pct: float = DEFAULT_MARGIN_PCT

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def text(self, digits: int = 2) -> str:
        """``"1.08× (0.85–1.30, range of 3×3 pairs, 90%)"``."""
        d = digits
        return f"{self.speedup:.{d}f}× ({self.low:.{d}f}–{self.high:.{d}f}, {self.coverage_text})"


def _clean(xs: Sequence[float]) -> list[float]:
    out = []
    for x in xs:
        if x is None:
            continue
        v = float(x)
        if math.isfinite(v) and v > 0:
            out.append(v)
    return out


def compare_groups(
    a: Sequence[float], b: Sequence[float], margin_pct: float = DEFAULT_MARGIN_PCT
) -> GroupComparison:
    """Group ``b``'s throughputs against group ``a``'s (one per run): the speedup of B over A, its
    distribution-free interval with exact coverage, and the verdict (``decide``) under
    ``margin_pct``. Raises ValueError when either group has no positive finite throughput."""
    xa, xb = _clean(a), _clean(b)
    if not xa or not xb:
        raise ValueError("compare_groups needs at least one positive throughput in each group")
    m, n = len(xa), len(xb)
    ratios = sorted(y / x for x in xa for y in xb)
    k, coverage = pair_ranks(m, n)
    low, high = ratios[k - 1], ratios[m * n - k]
    speedup = statistics.median(xb) / statistics.median(xa)
    # a verdict is a claim wrong at most 1 time in 20 per side: an interval covering less than
    # LEVEL (2×2 pairs: 67%, 1×3: 50%) cannot make it, however far from 1.0 it lies
    enough = coverage >= LEVEL - 1e-9
    text = coverage_text(m, n, coverage)
    return GroupComparison(
        speedup=speedup,
        low=low,
        high=high,
        coverage=round(coverage, 4),
        verdict=decide(low, high, margin_pct) if enough else WITHIN,
        coverage_text=text if enough else f"{text}; {TOO_FEW_RUNS}",
        runs_a=m,
        runs_b=n,
        margin_pct=float(margin_pct),
    )


def own_range(values: Sequence[float]) -> dict[str, Any]:
    """The baseline group against itself: 1, with its runs' own range around their median."""
    med = statistics.median(values)
    return {
        "value": 1.0,
        "ci_low": min(values) / med,
        "ci_high": max(values) / med,
        "within_noise": True,
        "coverage_text": f"the baseline's own range over {len(values)} runs",
    }


def windows_text(coverage: float | None, windows: Sequence[int] = ()) -> str:
    """The name of a one-run-against-one-run interval (its logging windows, autocorrelated): no
    run-to-run evidence; with too few steady windows, how few and what the interval covers."""
    few = [w for w in windows if w is not None and w < 5]
    if coverage is not None and (coverage < LEVEL or few):
        n = " and ".join(str(w) for w in windows)
        return (
            f"{ONE_EACH}; too few steady windows ({n}): covers about "
            f"{100 * coverage:.0f}% even if they were independent"
        )
    return ONE_EACH
