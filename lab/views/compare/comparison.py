"""The comparison of chosen runs against a baseline, as one value: ``compare`` builds a
``Comparison`` (each run's figures, its speedup, efficiency, verdict and scaling, how long its loss
agrees with the baseline's, the repeats of a sweep, the warnings and the notes) that the Compare
page, ``lab compare`` (text and JSON), the CSV and the HTML report render as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lab import tags
from lab.views.compare import anatomy, derived, groups, noise, sanity, scaling, varied
from lab.views.compare.fairness import FairnessWarning, fairness_warnings
from lab.views.compare.figures import RunFigures, run_figures
from lab.views.compare.groups import Group
from lab.views.compare.headline import Card, headline, warning_summary
from lab.views.compare.repeats import by_mode
from lab.views.compare.runs import CompareRun, labels, provenance
from lab.views.compare.scaling_curve import scaling_curve
from lab.views.compare.speed import Speed, speed
from lab.views.compare.verdict import Margin, margins_of

AGREEMENT_RTOL = 1e-3


@dataclass(frozen=True)
class Row:
    """One run against the baseline."""

    run: CompareRun
    name: str  # its display name, unique among the chosen runs
    figures: RunFigures
    speed: Speed  # speedup and efficiency on the figure both runs have
    is_baseline: bool
    verdict: str  # its group's (groups.Group.verdict): baseline, within noise, faster, slower, …
    scaling: str | None  # the scaling label, "… (assumed)" when the lab cannot see the batches
    loss_agreement: int | None  # last step train/loss agrees with the baseline's; None: baseline
    in_baseline: bool = False  # one of the baseline group's runs (the baseline's repeats)

    @property
    def key(self) -> str:
        return self.run.key

    @property
    def busy(self) -> bool | None:
        """Whether other work shared the machine (the supervisor's record); None: no record."""
        i = self.run.interference
        return None if i is None else bool(i.get("busy"))


@dataclass(frozen=True)
class Comparison:
    """The chosen runs compared against the baseline; every page, command and export renders it."""

    rows: tuple[Row, ...]
    baseline_key: str | None
    throughput_tag: str | None  # the throughput of runs without summary.json (derived.STEP_RATE)
    loss_tag: str | None  # the tag whose step rate is steps/s (None: each run's own)
    warnings: tuple[FairnessWarning, ...]  # fairness, derived figures, busy machines
    notes: tuple[str, ...]  # how to read derived figures (when any) and the noise
    anatomy: tuple[str, ...]  # the anatomy bars read with these runs' numbers
    by_mode: tuple[dict[str, Any], ...]  # each repeated mode's median over its repeats
    provenance: tuple[str, ...]  # where and when the runs were recorded
    headline: tuple[Card, ...] = ()  # the answer first: one card per mode against the baseline
    # per mode and device count of a device-count sweep (scaling_curve.scaling_curve)
    scaling_curve: tuple[dict[str, Any], ...] = ()
    # per option a knob sweep varied: each value's runs, throughput and speedup (varied.by_value)
    by_value: Mapping[str, list[dict[str, Any]]] | None = None
    groups: tuple[Group, ...] = ()  # every group against the baseline group (groups.build)
    margin: Margin = Margin()  # the baseline's device count's noise margin (each group has its own)

    @property
    def baseline_group(self) -> Group | None:
        return next((g for g in self.groups if g.is_baseline), None)

    def group_of(self, key: str) -> Group | None:
        """The group of the run ``key``."""
        return next((g for g in self.groups if key in g.keys), None)

    @property
    def baseline_text(self) -> str:
        """The baseline group and its own spread: ``"single on 1 device: 3 runs, 2639–3261
        samples/s (median 2686)"``; the margin the verdicts used."""
        g = self.baseline_group
        if g is None:
            return ""
        n = g.devices
        return (
            f"{g.mode} on {n} device{'s' * (n != 1)}: {g.spread_text()}; noise margin "
            f"{self.margin.pct:g}% ({self.margin.source})"
        )

    @property
    def warning_summary(self) -> str:
        """The warnings counted by cause in one line ("" without any)."""
        return warning_summary(self.warnings)

    @property
    def runs(self) -> list[CompareRun]:
        return [r.run for r in self.rows]

    @property
    def names(self) -> dict[str, str]:
        return {r.key: r.name for r in self.rows}

    @property
    def baseline(self) -> Row:
        return next(r for r in self.rows if r.is_baseline)

    @property
    def profiles(self) -> list[tuple[str, dict | None]]:
        """``(name, breakdown.json or None)`` per run, for the anatomy bars."""
        return [(r.name, r.figures.profile) for r in self.rows]


def choose_baseline(runs: Sequence[CompareRun]) -> str | None:
    """The default baseline run: of the default baseline group (``groups.baseline_group``: a knob
    sweep's first value, else single on the fewest devices), its run of median throughput, so that
    a run's own speedup against it divides by the group's median."""
    return _base_key(runs, {r.key: run_figures(r) for r in runs}) if runs else None


def loss_agreement(series: Any, baseline_series: Any, rtol: float = AGREEMENT_RTOL) -> int | None:
    """The last common step up to which ``series`` agrees with ``baseline_series`` within ``rtol``.

    Both are scalar series (``.step``, ``.value``); only the steps both logged
    are compared. None when they share no step or already differ at the first.
    Runs of different modes with the same seed and global batch compute the
    same steps, so they agree to float rounding at first; rounding differences
    between reduction orders then grow as training goes on.
    """
    if series is None or baseline_series is None:
        return None
    steps, ia, ib = np.intersect1d(
        np.asarray(series.step),
        np.asarray(baseline_series.step),
        assume_unique=False,
        return_indices=True,
    )
    if len(steps) == 0:
        return None
    a = np.asarray(series.value, dtype=float)[ia]
    b = np.asarray(baseline_series.value, dtype=float)[ib]
    rel = np.abs(a - b) / np.maximum(np.abs(b), 1e-12)
    bad = np.flatnonzero(~(rel <= rtol))  # NaN counts as disagreement
    if len(bad) == 0:
        return int(steps[-1])
    return None if bad[0] == 0 else int(steps[bad[0] - 1])


def _row(
    r: CompareRun, name: str, m: RunFigures, sp: Speed, baseline_key: str, scalars: Mapping
) -> Row:
    is_baseline = r.key == baseline_key
    label = scaling.label(r.scaling, sp.related)
    agreement = (
        None
        if is_baseline
        else loss_agreement(
            scalars.get(r.key, {}).get(tags.TRAIN_LOSS),
            scalars.get(baseline_key, {}).get(tags.TRAIN_LOSS),
        )
    )
    return Row(
        run=r,
        name=name,
        figures=m,
        speed=sp,
        is_baseline=is_baseline,
        verdict="",  # its group's, once the groups are built
        scaling=f"{label} (assumed)" if sp.assumed and label else label,
        loss_agreement=agreement,
    )


def _base_key(runs: Sequence[CompareRun], figures: Mapping[str, RunFigures]) -> str:
    key = groups.baseline_group(runs, figures)
    members = [r for r in runs if groups.group_key(r, figures[r.key]) == key]
    return groups.representative(members, figures)


def _with_groups(rows: tuple[Row, ...], found: tuple[Group, ...]) -> tuple[Row, ...]:
    """The rows with their group's verdict; the baseline group's runs marked as such."""
    by_key = {k: g for g in found for k in g.keys}
    return tuple(
        replace(r, verdict=by_key[r.key].verdict, in_baseline=by_key[r.key].is_baseline)
        for r in rows
    )


def compare(
    runs: Sequence[CompareRun],
    baseline_key: str | None = None,
    scalars: Mapping[str, Mapping[str, Any]] | None = None,
    throughput_tag: str | None = None,
    loss_tag: str | None = None,
    margin: Any = None,
) -> Comparison:
    """The comparison of ``runs`` against the baseline group: that of ``baseline_key`` (default:
    ``groups.baseline_group``, its run of median throughput being ``baseline_key``).

    ``scalars`` maps a run key to its event series (``runs.read_scalars``): the figures of runs
    without summary.json, steps/s, utilisation and the loss agreement. ``throughput_tag``: the
    throughput of runs without summary.json (default: the first of ``derived.throughput_options``;
    None when every run has one); ``loss_tag``: whose step rate is steps/s (default: each run's own
    first loss tag). ``margin``: the noise margin (a percent, a ``Margin``-like ``pct`` and
    ``source``, or ``(host, devices) -> Margin-like | None``: the latest measured for the baseline
    run's host and each group's device count; default the documented 10%).
    """
    if not runs:
        return Comparison((), None, throughput_tag, loss_tag, (), (), (), (), ())
    sc = scalars or {}
    throughput_tag = throughput_tag or derived.default_throughput(runs, sc)
    names = labels(runs)
    figures = {r.key: run_figures(r, sc.get(r.key), throughput_tag, loss_tag) for r in runs}
    if baseline_key not in {r.key for r in runs}:
        baseline_key = _base_key(runs, figures)
    speeds = {k: speed(m, figures[baseline_key]) for k, m in figures.items()}
    rows = tuple(
        _row(r, names[r.key], figures[r.key], speeds[r.key], baseline_key, sc) for r in runs
    )
    base = next(r for r in rows if r.is_baseline)
    mg = margins_of(margin, base.run.host)
    found = groups.build(rows, groups.group_key(base.run, base.figures), mg)
    rows = _with_groups(rows, found)
    # what a knob sweep varied is the intended difference: no fairness warning for it
    warnings = varied.exempt(fairness_warnings(runs, names, figures, speeds, baseline_key), runs)
    warnings += sanity.warnings(runs, names, found)
    # how to read derived figures goes with the noise notes, so every rendering carries it
    derived_note = [derived.HOW_TO_READ] if any(not r.summary for r in runs) else []
    return Comparison(
        rows=rows,
        baseline_key=baseline_key,
        throughput_tag=throughput_tag,
        loss_tag=loss_tag,
        warnings=tuple(warnings + noise.busy_warnings(runs)),
        notes=tuple(derived_note + noise.noise_notes(found)),
        anatomy=tuple(anatomy.explain([(names[k], m.profile) for k, m in figures.items()])),
        by_mode=tuple(by_mode(runs, sc, baseline_key, mg, found)),
        provenance=tuple(provenance(runs)),
        headline=headline(rows, found),
        scaling_curve=tuple(scaling_curve(runs, figures, mg)),
        by_value=varied.by_value(runs, figures, mg),
        groups=found,
        margin=mg.at(base.figures.device_count),
    )
