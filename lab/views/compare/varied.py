"""A knob sweep read back (``sweep --vary``): the varied options are the intended difference.

``by_value`` groups the runs of each varied option by its value, the way repeats are grouped by
mode, within runs that are otherwise alike (the same sweep, asked mode, device count and other
varied values: ``with``): per value the pooled throughput with its interval
(``scaling_curve.pooled``: one run's own interval, or the median of the runs' medians and its
interval), the profiled runs' step and exposed communication (``anatomy``), the speedup
against the first value and its verdict (over the pairs of runs, ``verdict.compare_groups``, when
either value has repeats; else the two runs' windows, ``spread.ratio``, with no run-to-run
evidence).
``exempt`` drops the fairness warnings about what was varied (``fairness``: the runs differ in
the seed, batch, precision or model a sweep meant to vary).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from lab.views.compare import anatomy
from lab.views.compare.fairness import FairnessWarning
from lab.views.compare.figures import RunFigures
from lab.views.compare.repeats import asked_mode, devices
from lab.views.compare.runs import CompareRun, shown_value
from lab.views.compare.scaling_curve import pooled
from lab.views.compare.spread import ratio
from lab.views.compare.verdict import (
    BASELINE,
    NO_RUN_TO_RUN,
    ONE_EACH,
    WITHIN,
    compare_groups,
    margins_of,
    one_run_each,
    own_range,
)

# a varied option (its flag without dashes) -> the fairness warning its difference would raise
WARNING_OF = {
    "batch-size": "global_batch",
    "seed": "seed",
    "amp": "amp",
    "precision": "amp",
    "model": "model",
}


def exempt(
    warnings: Sequence[FairnessWarning], runs: Sequence[CompareRun]
) -> list[FairnessWarning]:
    """``warnings`` less those about an option some run's knob sweep varied on purpose."""
    varied = {k for r in runs for k in (r.varied or {})}
    intended = {WARNING_OF.get(k, k.replace("-", "_")) for k in varied}
    return [w for w in warnings if w.key not in intended]


def _context(r: CompareRun, flag: str) -> str:
    others = " ".join(f"{k}={shown_value(v)}" for k, v in (r.varied or {}).items() if k != flag)
    return f"{asked_mode(r)} x{devices(r)} {others}".strip()


def _value_group(
    value: Any, members: list[CompareRun], figures: Mapping[str, RunFigures]
) -> dict[str, Any]:
    spreads = [s for r in members if (s := figures[r.key].spread) is not None]
    s = pooled(spreads) if spreads else None
    return {
        "value": value,
        "runs": [r.run_id for r in members],
        "throughput": None
        if s is None
        else {"median": s.median, "ci_low": s.ci_low, "ci_high": s.ci_high},
        **_anatomy(members, figures),
        "_spread": s,
        "_values": [x for r in members if (x := figures[r.key].throughput) is not None],
    }


def _anatomy(members: list[CompareRun], figures: Mapping[str, RunFigures]) -> dict[str, Any]:
    """The profiled runs' step and exposed communication (``anatomy``), medians in ms; None where
    no run of the value was profiled."""
    steps, exposed = [], []
    for r in members:
        data = figures[r.key].profile or {}
        if data.get("step_ms"):
            steps.append(float(data["step_ms"]))
            exposed.append(anatomy.comm_segments(data.get("phases_ms") or {})["comm_exposed"])
    return {
        "step_ms": statistics.median(steps) if steps else None,
        "comm_exposed_ms": statistics.median(exposed) if exposed else None,
    }


def _against_first(
    g: dict[str, Any], first: dict[str, Any], margin_pct: float
) -> tuple[dict[str, Any] | None, str]:
    """The value's speedup against the first value and its verdict: over the pairs of runs
    (``verdict.compare_groups``) when either has repeats, else the two runs' windows."""
    a, b = first["_values"], g["_values"]
    if g is first:  # the baseline: 1, and its own spread around its median
        if len(a) > 1:
            return own_range(a), BASELINE
        own = ratio(g["_spread"], g["_spread"])
        return (
            None if own is None else {**own.to_json(), "coverage_text": NO_RUN_TO_RUN}
        ), BASELINE
    if len(a) > 1 or len(b) > 1:
        if not a or not b:
            return None, ""
        c = compare_groups(a, b, margin_pct)
        return {
            "value": c.speedup,
            "ci_low": c.low,
            "ci_high": c.high,
            "within_noise": c.verdict == WITHIN,
            "coverage": c.coverage,
            "coverage_text": c.coverage_text,
        }, c.verdict
    sp = ratio(g["_spread"], first["_spread"])
    if sp is None:
        return None, ""
    return {**sp.to_json(), "coverage_text": ONE_EACH}, one_run_each(sp.ci_low, sp.ci_high)


def by_value(
    runs: Sequence[CompareRun],
    figures: Mapping[str, RunFigures],
    margin: Any = None,
) -> dict[str, list[dict[str, Any]]]:
    """``{flag: [{"value", "with", "runs", "throughput", "step_ms", "comm_exposed_ms", "speedup",
    "verdict"}]}`` per varied
    option, the values in the order the runs were made (the sweep's), the speedup against the first
    value ``with`` the same mode, device count and other values; empty without a knob sweep."""
    margins = margins_of(margin)
    out: dict[str, list[dict[str, Any]]] = {}
    # the sweep's order: by creation, then (the same second) its record's (``CompareRun.made``)
    runs = sorted(runs, key=lambda r: r.made)
    flags = list(dict.fromkeys(k for r in runs for k in (r.varied or {})))
    for flag in flags:
        grouped: dict[tuple[str, str, str], list[CompareRun]] = {}
        for r in runs:
            if r.varied and flag in r.varied:
                key = (r.sweep_id or "", _context(r, flag), repr(r.varied[flag]))
                grouped.setdefault(key, []).append(r)
        entries = []
        firsts: dict[tuple[str, str], dict[str, Any]] = {}
        for (sweep, context, _), members in grouped.items():
            g = _value_group(members[0].varied[flag], members, figures)
            first = firsts.setdefault((sweep, context), g)
            pct = margins.at(devices(members[0])).pct
            sp, verdict = _against_first(g, first, pct)
            g.update({"with": context, "speedup": sp, "verdict": verdict})
            entries.append(g)
        for g in entries:
            del g["_spread"], g["_values"]
        out[flag] = entries
    return out
