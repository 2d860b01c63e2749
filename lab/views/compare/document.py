"""A ``Comparison`` as ``python -m lab compare`` prints it: the ``--json`` document (``to_json``,
its keys a contract: docs/contracts.md section 6) and the lines for a terminal (``text``).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pandas as pd

from lab.views.compare import anatomy, memory
from lab.views.compare.comparison import Comparison, Row
from lab.views.compare.groups import Group
from lab.views.compare.headline import Card
from lab.views.compare.spread import Ratio, Spread


def _ratio_json(r: Ratio | None, value: float | None) -> dict[str, Any] | None:
    if r is not None:
        return r.to_json()
    return (
        None
        if value is None
        else {"value": value, "ci_low": None, "ci_high": None, "within_noise": None}
    )


def _spread_json(s: Spread | None, value: float | None) -> dict[str, Any] | None:
    if s is not None:
        return {
            "median": s.median,
            "ci_low": s.ci_low,
            "ci_high": s.ci_high,
            "windows": s.windows,
            "coverage": s.coverage,  # if the windows were independent (they are not)
        }
    return (
        None
        if value is None
        else {"median": value, "ci_low": None, "ci_high": None, "windows": None, "coverage": None}
    )


def _run_json(row: Row) -> dict[str, Any]:
    r, m, sp = row.run, row.figures, row.speed
    return {
        "run_id": r.run_id,
        "name": r.name,
        "kind": r.kind,
        "figures": m.figures,
        "mode": m.mode,
        "effective_mode": m.effective_mode,
        "devices": m.devices,
        "sweep_id": r.sweep_id,
        "varied": r.varied,
        "throughput": _spread_json(m.spread, None),
        "throughput_of": m.throughput_of,
        "steps_per_sec": _spread_json(m.steps_spread, m.steps_per_sec),
        "loss_tag": m.loss_tag,
        "speedup_of": sp.of,
        "speedup": _ratio_json(sp.ratio, sp.speedup),
        "efficiency": _ratio_json(
            sp.scaled, None if sp.speedup is None else sp.speedup * sp.factor
        ),
        "wall_time_s": m.wall_time_s,
        "peak_mem_mib": m.peaks,
        "peak_mem_of": m.peaks_of,
        "verdict": row.verdict,
        "interference": r.interference,
        # what the page shows beside the speed: the same numbers, for scripts
        "loss_agreement_step": row.loss_agreement,
        "utilisation": {
            "overall_pct": m.utilisation.overall,
            "per_gpu_pct": dict(m.utilisation.per_gpu),
            "per_gpu_sm_active_pct": dict(m.utilisation.per_gpu_sm),
            "on_cpu": m.utilisation.on_cpu,
        },
        "memory": [asdict(x) for x in memory.run_rows(row.name, r.summary)],
        "step_breakdown_ms": _breakdown(m.profile),
        "comm_exposed_pct": m.comm_exposed_pct,
        # --compile on: the first steps' compile time, which the throughput leaves out
        "compile_s": (r.summary or {}).get("compile_s"),
    }


def _breakdown(profile: dict | None) -> dict[str, float] | None:
    """A profiled run's step in the anatomy chart's segments (ms), with its communication."""
    if not profile:
        return None
    phases = profile.get("phases_ms") or {}
    split = anatomy.split_segments(phases) or {}  # fsdp: all-gather and reduce-scatter apart
    return {**anatomy.step_segments(phases), **anatomy.comm_segments(phases), **split}


def _group_json(c: Comparison) -> dict[str, Any] | None:
    g = c.baseline_group
    if g is None:
        return None
    return {
        "mode": g.mode,
        "devices": g.devices,
        "runs": [r.run.run_id for r in c.rows if r.key in g.keys],
        "throughputs": list(g.values),
        "spread_text": g.spread_text(),
    }


def to_json(c: Comparison) -> dict[str, Any]:
    """The comparison as the ``compare --json`` document: per run its figures (measured or
    derived), throughput spread, steps/s, speedup and efficiency as ``{"value", "ci_low",
    "ci_high", "within_noise"}``, the verdict and the supervisor's ``interference``; the baseline,
    the throughput tag, the warnings, each repeated mode's median (``by_mode``) and, per option a
    knob sweep varied, each value against the first (``by_value``); each run's ``varied``; the
    baseline group (``baseline_group``), the noise margin the verdicts used (``margin``) and the
    memory per device against throughput, a point per mode and count (``memory_frontier``) with
    its sentences (``memory_trade``)."""
    points = memory.frontier([row.run for row in c.rows])
    return {
        "headline": [card.to_json() for card in c.headline],
        "baseline": c.baseline.run.run_id,
        "baseline_group": _group_json(c),
        "margin": {"pct": c.margin.pct, "source": c.margin.source},
        "throughput_tag": c.throughput_tag,
        "runs": [_run_json(row) for row in c.rows],
        "warnings": [w.message for w in c.warnings],
        "by_mode": list(c.by_mode),
        "scaling_curve": list(c.scaling_curve),
        "by_value": dict(c.by_value or {}),
        "memory_frontier": [asdict(p) for p in points],
        "memory_trade": memory.trade(points),
    }


def _tp_text(t: dict | None) -> str:
    return "–" if not t else f"{t['median']:.1f} ({t['ci_low']:.1f}–{t['ci_high']:.1f})"


def _steps_text(t: dict | None) -> str:
    if not t:
        return "–"
    return f"{t['median']:.3g}" + (
        "" if t["ci_low"] is None else f" ({t['ci_low']:.3g}–{t['ci_high']:.3g})"
    )


def _row_text(name: str, r: dict[str, Any], group: Group | None) -> dict[str, str]:
    """One run's line; its speedup, efficiency and verdict are its group's (the cards')."""
    if group is None or group.speedup is None and not group.is_baseline:
        sp, eff = "–", "–"
    elif group.is_baseline:
        sp, eff = f"baseline: {group.spread_text()}", "–"
    else:
        sp = group.speedup_text()
        eff = "–" if group.efficiency is None else f"{group.efficiency:.2f}"
    return {
        "run": name,
        "figures": r["figures"],
        "mode": r["mode"],
        "throughput (samples/s)": _tp_text(r["throughput"]),
        "steps/s": _steps_text(r.get("steps_per_sec")),
        "speedup of": r["speedup_of"] or "–",
        "group speedup": sp,
        "efficiency": eff,
        "noise": r["verdict"] or "–",
        "machine": "–"
        if r["interference"] is None
        else ("busy" if r["interference"].get("busy") else "quiet"),
    }


def _card_text(card: Card) -> str:
    why = f"; {card.reason}" if card.reason else ""
    eff = "" if card.efficiency is None else f", efficiency {card.efficiency:.2f}"
    return (
        f"headline: {card.mode} on {card.devices}: {card.speedup_text()} {card.verdict or ''}"
        f"{eff}{why}"
    )


def text(c: Comparison) -> list[str]:
    """The comparison as lines for a terminal: the table, the warnings, the repeats."""
    doc = to_json(c)
    rows = [_row_text(row.name, r, c.group_of(row.key)) for row, r in zip(c.rows, doc["runs"])]
    lines = [
        f"baseline: {c.baseline.name} ({doc['baseline']}); group {c.baseline_text}",
        *(_card_text(card) for card in c.headline),
        pd.DataFrame(rows).to_string(index=False),
    ]
    lines += [f"warning: {w}" for w in doc["warnings"]]
    lines += [f"memory: {sentence}" for sentence in doc["memory_trade"]]
    lines += _beside_speed(c, doc)
    for g in doc["by_mode"]:
        sp = "" if g["speedup"] is None else f", speedup of medians {g['speedup']:.2f}"
        if g.get("ci_low") is not None:
            sp += f" ({g['ci_low']:.2f}–{g['ci_high']:.2f}, {g['coverage_text']})"
        sp += f", {g['verdict']}" if g.get("verdict") else ""
        lines.append(
            f"repeats: {g['sweep_id']} {g['mode']}: median {g['median']:.1f} samples/s over "
            f"{g['repeats']} "
            f"runs (min {g['min']:.1f}, max {g['max']:.1f}, spread {g['spread_pct']:.1f}%){sp}"
        )
    for flag, values in doc["by_value"].items():
        lines += [_value_text(flag, g) for g in values]
    return lines


def _beside_speed(c: Comparison, doc: dict[str, Any]) -> list[str]:
    """What the page shows beside the speed, a line per run: loss agreement with the baseline,
    utilisation, memory per device (peak over estimate) and the profiled step's breakdown."""
    lines = []
    for row, r in zip(c.rows, doc["runs"]):
        parts = []
        if not row.is_baseline:
            step = r["loss_agreement_step"]
            parts.append("loss: no common steps" if step is None else f"loss agrees to step {step}")
        if r["compile_s"] is not None:
            parts.append(f"compiled in {r['compile_s']:.1f} s (left out of the throughput)")
        u = r["utilisation"]
        if u["overall_pct"] is not None:
            parts.append(f"{'CPU share' if u['on_cpu'] else 'GPU util'} {u['overall_pct']:.0f}%")
        for m in r["memory"]:
            used = "–" if m["measured_mib"] is None else f"{m['measured_mib']:.0f}"
            parts.append(f"{m['device']} memory {used}/{m['estimate_mib']:.0f} MiB (peak/estimate)")
        b = r["step_breakdown_ms"]
        if b:
            parts.append("step " + ", ".join(f"{k} {v:.1f} ms" for k, v in b.items() if v > 0))
        if parts:
            lines.append(f"{row.name}: " + "; ".join(parts))
    return lines


def _value_text(flag: str, g: dict[str, Any]) -> str:
    """One value of a knob sweep: ``bucket-cap-mb=25 (ddp x2): 812.0 (790.1–830.2) samples/s,
    1.04× (0.97–1.12) against the first value, within noise``."""
    sp = g["speedup"]
    against = "–" if sp is None else f"{sp['value']:.2f}× ({sp['ci_low']:.2f}–{sp['ci_high']:.2f}"
    against += "" if sp is None or not sp.get("coverage_text") else f", {sp['coverage_text']}"
    against += "" if sp is None else ")"
    return (
        f"by value: {flag}={g['value']} ({g['with']}) over {len(g['runs'])} runs: "
        f"{_tp_text(g['throughput'])} samples/s, {against} against the first value, "
        f"{g['verdict'] or '–'}"
    )
