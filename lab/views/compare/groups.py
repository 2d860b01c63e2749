"""Groups, not runs: a comparison with repeats is between groups of runs (the asked mode with a knob
sweep's values, and the device count), each summarised by its runs' steady-state throughputs.

``group_key`` names a run's group; ``baseline_group`` picks the default baseline group (the first
value of a knob sweep, else single on the fewest devices, a run that trained in several processes
under single placement last); ``representative`` picks its run of median throughput (the run each
row's own speedup divides by). ``build`` compares every group with the baseline group through
``verdict.compare_groups`` (several runs on either side: the interval over the pairs of runs with
its exact coverage) or, one run against one run, through the runs' logging windows, labelled as
having no run-to-run evidence and making no claim (``verdict.one_run_each``); the verdict is
``verdict.decide`` under the noise margin, and ``verdict.sane`` for a strong-scaling efficiency
above 1.1.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.engine.spec.modes import SINGLE
from lab.engine.spec.sweep import STRONG, WEAK
from lab.views.compare import verdict as v
from lab.views.compare.derived import SAMPLES
from lab.views.compare.figures import RunFigures
from lab.views.compare.runs import CompareRun

BASELINE_HELP = (
    "The baseline is a group: the runs of this run's sweep with the same mode, knob values and "
    "device count (its repeats). Default: the first value of a knob sweep, else single on the "
    "fewest devices."
)
GroupKey = tuple[str, str, int]  # (sweep id, or "run:" and the run's key outside a sweep; mode; n)


def mode_label(run: CompareRun, figures: RunFigures) -> str:
    """The asked mode; a weak-scaling run is a mode of its own (it trains a larger global batch),
    and so is each value of a knob sweep (``ddp bucket-cap-mb=25``)."""
    mode = str(figures.mode or figures.effective_mode or "?")
    mode = f"{mode} (weak)" if run.scaling == WEAK else mode
    return f"{mode} {run.varied_text}".strip()


def group_key(run: CompareRun, figures: RunFigures) -> GroupKey:
    """(scope, mode label, device count): the group a run belongs to. Repeats are a sweep's: runs
    of one sweep with the same mode, knob values and device count; a run outside a sweep is a
    group of its own (two runs a user made apart are two questions, not repeats)."""
    scope = run.sweep_id or f"run:{run.key}"
    return scope, mode_label(run, figures), figures.device_count


def ran_as_another(figures: RunFigures) -> bool:
    """Whether the run ran as another mode than asked (DP on one device runs as single)."""
    return bool(figures.mode and figures.effective_mode and figures.effective_mode != figures.mode)


def several_processes(run: CompareRun) -> bool:
    """A run placed as single whose process tree trained in several processes at once."""
    return str(run.option("mode") or "") == SINGLE and int(run.train_processes or 0) >= 2


def _first_varied(runs: Sequence[CompareRun]) -> str | None:
    """The varied values of a knob sweep's first run (its first value), None without a sweep."""
    swept = [r for r in runs if r.varied]
    if not swept:
        return None
    return min(swept, key=lambda r: r.made).varied_text


def baseline_group(runs: Sequence[CompareRun], figures: Mapping[str, RunFigures]) -> GroupKey:
    """The default baseline group: among the runs of a knob sweep's first value (all runs without
    a knob sweep), single as asked and run, on the fewest devices; a single run that trained in
    several processes only when nothing else is there."""
    first = _first_varied(runs)
    pool = [r for r in runs if first is None or r.varied_text == first] or list(runs)

    def kind(r: CompareRun) -> tuple:
        m = figures[r.key]
        asked_single = m.mode == SINGLE and m.effective_mode in (None, SINGLE)
        return (several_processes(r), not asked_single, len(m.devices) or 99)

    best = min(pool, key=lambda r: (kind(r), r.made))
    return group_key(best, figures[best.key])


def representative(members: Sequence[CompareRun], figures: Mapping[str, RunFigures]) -> str:
    """The run of median throughput of a group (the earliest of two middles), else its first."""
    tied = sorted(members, key=lambda r: r.made)
    speeds = [figures[r.key].throughput for r in tied]
    if len(tied) < 3 or any(s is None for s in speeds):
        return tied[0].key
    order = sorted(range(len(tied)), key=lambda i: (speeds[i], i))
    return tied[order[(len(tied) - 1) // 2]].key


@dataclass(frozen=True)
class Group:
    """One group's runs against the baseline group, with the one verdict every rendering shows."""

    mode: str
    devices: int
    keys: tuple[str, ...]
    values: tuple[float, ...]  # each run's throughput (or steps/s: ``unit``)
    unit: str | None
    is_baseline: bool
    ran_as: str | None  # every run ran as this other mode (DP on one device: single): no card
    speedup: float | None = None
    low: float | None = None
    high: float | None = None
    coverage: float | None = None
    coverage_text: str | None = None
    verdict: str = ""
    efficiency: float | None = None
    strong: bool = True
    margin_pct: float = v.DEFAULT_MARGIN_PCT  # the noise margin its verdict used
    margin_source: str = v.DEFAULT_SOURCE

    @property
    def runs(self) -> int:
        return len(self.keys)

    def interval_text(self) -> str | None:
        """``"0.85–1.30, range of 3×3 pairs, 90%"``; None without an interval."""
        if self.low is None or self.high is None:
            return None
        return f"{self.low:.2f}–{self.high:.2f}, {self.coverage_text}"

    def speedup_text(self) -> str:
        """``"1.08× (0.85–1.30, range of 3×3 pairs, 90%)"``, ``"–"`` without a speedup."""
        if self.speedup is None:
            return "–"
        interval = self.interval_text()
        return f"{self.speedup:.2f}×" + (f" ({interval})" if interval else "")

    def spread_text(self) -> str:
        """The group's own spread: ``"3 runs, 2639–3261 samples/s (median 2686)"``."""
        if not self.values:
            return "no throughput"
        unit = "samples/s" if self.unit == SAMPLES else "steps/s"
        med = statistics.median(self.values)
        if len(self.values) == 1:
            return f"1 run, {med:.4g} {unit}"
        lo, hi = min(self.values), max(self.values)
        return f"{len(self.values)} runs, {lo:.4g}–{hi:.4g} {unit} (median {med:.4g})"


def _unit(rows: Sequence[Any]) -> str | None:
    units = {r.speed.unit for r in rows}
    return units.pop() if len(units) == 1 else None


def _value(m: RunFigures, unit: str | None) -> float | None:
    return m.throughput if unit == SAMPLES else m.steps_per_sec if unit else None


def _factor(rows: Sequence[Any]) -> float | None:
    """efficiency / speedup of the group's rows (base devices / devices), None without one."""
    for r in rows:
        if r.speed.efficiency is not None and r.speed.speedup:
            return r.speed.efficiency / r.speed.speedup
    return None


def _windows(row: Any, base: Any) -> dict[str, Any]:
    """One run against one run: the ratio of their windows' intervals, no run-to-run evidence
    and no verdict beyond *within noise* (``verdict.one_run_each``)."""
    sp, unit = row.speed, row.speed.unit
    if sp.ratio is None:
        return {"speedup": sp.speedup, "verdict": ""}
    spreads = [
        (x.figures.spread if unit == SAMPLES else x.figures.steps_spread) for x in (row, base)
    ]
    cov = spreads[0].coverage * spreads[1].coverage if all(spreads) else None
    windows = [s.windows for s in spreads if s is not None]
    return {
        "speedup": sp.ratio.value,
        "low": sp.ratio.ci_low,
        "high": sp.ratio.ci_high,
        "coverage": None if cov is None else round(cov, 4),
        "coverage_text": v.windows_text(cov, windows),
        "verdict": v.one_run_each(sp.ratio.ci_low, sp.ratio.ci_high),
    }


def _against(rows: Sequence[Any], base_rows: Sequence[Any], margin_pct: float) -> dict[str, Any]:
    unit = _unit(rows)
    values = [x for r in rows if (x := _value(r.figures, unit)) is not None]
    base = [x for r in base_rows if (x := _value(r.figures, unit)) is not None]
    if unit is None or not values or not base:
        return {}
    if len(rows) == 1 and len(base_rows) == 1:
        return _windows(rows[0], base_rows[0])
    g = v.compare_groups(base, values, margin_pct)
    return {
        "speedup": g.speedup,
        "low": g.low,
        "high": g.high,
        "coverage": g.coverage,
        "coverage_text": g.coverage_text,
        "verdict": g.verdict,
    }


def _labels(grouped: Mapping[GroupKey, list[Any]]) -> dict[GroupKey, str]:
    """Each group's shown mode: its mode label, and where two groups share mode and device count,
    its sweep or its run's name after it."""
    seen: dict[tuple[str, int], int] = {}
    for _, mode, n in grouped:
        seen[(mode, n)] = seen.get((mode, n), 0) + 1
    out = {}
    for key, members in grouped.items():
        scope, mode, n = key
        where = members[0].name if scope.startswith("run:") else scope
        out[key] = mode if seen[(mode, n)] == 1 else f"{mode} ({where})"
    return out


def build(rows: Sequence[Any], base_key: GroupKey, margin: Any = None) -> tuple[Group, ...]:
    """Every group of ``rows`` (``comparison.Row``: run, name, figures, speed) in the rows' order,
    each against the baseline group ``base_key`` under its device count's noise margin
    (``verdict.margins_of(margin)``)."""
    margins = v.margins_of(margin)
    grouped: dict[GroupKey, list[Any]] = {}
    for r in rows:
        grouped.setdefault(group_key(r.run, r.figures), []).append(r)
    base_rows = grouped.get(base_key, [])
    labels = _labels(grouped)
    out = []
    for key, members in grouped.items():
        unit = _unit(members)
        values = tuple(x for r in members if (x := _value(r.figures, unit)) is not None)
        ran = {r.figures.effective_mode for r in members if ran_as_another(r.figures)}
        common = {
            "mode": labels[key],
            "devices": key[2],
            "keys": tuple(r.key for r in members),
            "values": values,
            "unit": unit,
            "ran_as": ran.pop()
            if len(ran) == 1 and all(ran_as_another(r.figures) for r in members)
            else None,
        }
        m = margins.at(key[2])
        common.update(margin_pct=m.pct, margin_source=m.source)
        if key == base_key:
            out.append(Group(**common, is_baseline=True, verdict=v.BASELINE))
            continue
        found = _against(members, base_rows, m.pct)
        factor = _factor(members)
        sp = found.get("speedup")
        eff = None if sp is None or factor is None else sp * factor
        # a scaling question (more devices than the baseline's, the same global batch)
        strong = members[0].speed.related == STRONG and key[2] > base_key[2]
        found["verdict"] = v.sane(found.get("verdict", ""), eff, strong)
        out.append(Group(**common, is_baseline=False, efficiency=eff, strong=strong, **found))
    return tuple(out)
