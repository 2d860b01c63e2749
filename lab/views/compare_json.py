"""``python -m lab compare RUN… [--baseline RUN] [--json]``: the Compare table for a terminal or a CI job.

Owns which runs a command line names (run ids, or sweep ids meaning all their
runs, ``resolve``), the comparison as JSON (``comparison``: per run its
``throughput`` spread, ``speedup`` and ``efficiency`` as ``{"value",
"ci_low", "ci_high", "within_noise"}``, the verdict and the supervisor's
``interference``; top-level ``baseline``, ``warnings`` (fairness and busy
machine) and ``by_mode`` (each mode's median over a sweep's repeats)) and
the same as text lines (``text``). The figures are those of
``lab.views.compare``, ``lab.views.noise`` and ``lab.views.compare_repeats``.
Tested by tests/test_noise.py and tests/test_noise_runs.py (real runs).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from lab.engine.registry import RunNotFound, get_run, list_runs
from lab.events import LogdirReader
from lab.runfolder import SWEEPS_DIR, check_run_id, read_json
from lab.views import compare, compare_repeats, fairness, noise
from lab.views.compare_runs import CompareRun, from_record, labels
from lab.views.runscalars import run_scalars
from lab.views.spread import Ratio, ratio


def _sweep_run_ids(sweep_id: str, root: Path) -> list[str]:
    sweep = read_json(root / SWEEPS_DIR / f"{check_run_id(sweep_id)}.json") or {}
    ids = list(sweep.get("run_ids") or [])
    if not ids:  # the sweep file is gone: its runs still say which sweep they were
        ids = [r.run_id for r in sorted(list_runs(root), key=lambda r: r.created_at or "") if r.sweep_id == sweep_id]
    if not ids:
        raise RunNotFound(f"no sweep {sweep_id!r} in {root}: see `python -m lab status` for the run ids")
    return ids


def resolve(names: Sequence[str], root: Path) -> list[CompareRun]:
    """The runs named by run ids or sweep ids (a sweep: all its runs, in its order), each once."""
    out: list[CompareRun] = []
    for name in names:
        for rid in _sweep_run_ids(name, root) if name.startswith("sweep-") else [name]:
            if rid not in {r.run_id for r in out}:
                out.append(from_record(get_run(rid, root)))
    return out


def load_scalars(runs: Sequence[CompareRun]) -> dict[str, dict[str, Any]]:
    """Each run's event series by key (throughput windows of runs without summary.json's, loss agreement)."""
    return {r.key: run_scalars(LogdirReader(str(r.run_dir))) for r in runs}


def _ratio_json(r: Ratio | None, value: float | None) -> dict[str, Any] | None:
    if r is not None:
        return r.to_json()
    return None if value is None else {"value": value, "ci_low": None, "ci_high": None, "within_noise": None}


def _run_json(r: CompareRun, m: dict, base: dict, is_baseline: bool, base_devices: int) -> dict[str, Any]:
    rat = ratio(m["spread"], base["spread"])
    sp = rat.value if rat else compare.speedup(m["throughput"], base["throughput"])
    factor = base_devices / (len(m["devices"]) or 1)
    s = m["spread"]
    return {
        "run_id": r.run_id, "name": r.name, "mode": m["mode"], "effective_mode": m["effective mode"],
        "devices": m["devices"], "sweep_id": r.sweep_id,
        "throughput": None if s is None else {"median": s.median, "ci_low": s.ci_low, "ci_high": s.ci_high,
                                              "windows": s.windows},
        "speedup": _ratio_json(rat, sp),
        "efficiency": _ratio_json(rat.scaled(factor) if rat else None, None if sp is None else sp * factor),
        "verdict": noise.verdict(rat, is_baseline), "interference": noise.run_interference(r),
    }


def comparison(runs: Sequence[CompareRun], baseline_key: str | None = None,
               scalars: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The comparison as the ``compare --json`` document (see the module docstring)."""
    keys = {r.key for r in runs}
    baseline_key = baseline_key if baseline_key in keys else compare.choose_baseline(runs)
    metrics = {r.key: compare.run_metrics(r, (scalars or {}).get(r.key)) for r in runs}
    base = metrics[baseline_key]
    base_devices = len(base["devices"]) or 1
    warnings = fairness.fairness_warnings(runs) + noise.busy_warnings(runs)
    return {
        "baseline": next(r.run_id for r in runs if r.key == baseline_key),
        "runs": [_run_json(r, metrics[r.key], base, r.key == baseline_key, base_devices) for r in runs],
        "warnings": [w.message for w in warnings],
        "by_mode": compare_repeats.by_mode(runs, scalars, baseline_key),
    }


def _tp_text(t: dict | None) -> str:
    return "–" if not t else f"{t['median']:.1f} ({t['ci_low']:.1f}–{t['ci_high']:.1f})"


def text(doc: Mapping[str, Any], runs: Sequence[CompareRun]) -> list[str]:
    """The comparison as lines for a terminal: the table, the warnings, the repeats."""
    names = {r.run_id: labels(runs)[r.key] for r in runs}
    rows = []
    for r in doc["runs"]:
        sp, eff = r["speedup"], r["efficiency"]
        rows.append({
            "run": names[r["run_id"]], "mode": r["mode"], "throughput (samples/s)": _tp_text(r["throughput"]),
            "speedup": "–" if sp is None else (Ratio(**sp).text() if sp["ci_low"] is not None else f"{sp['value']:.2f}×"),
            "efficiency": "–" if eff is None else (f"{eff['value']:.2f} ({eff['ci_low']:.2f}–{eff['ci_high']:.2f})"
                                                    if eff["ci_low"] is not None else f"{eff['value']:.2f}"),
            "noise": r["verdict"] or "–",
            "machine": "–" if r["interference"] is None else ("busy" if r["interference"].get("busy") else "quiet"),
        })
    lines = [f"baseline: {names[doc['baseline']]} ({doc['baseline']})", pd.DataFrame(rows).to_string(index=False)]
    lines += [f"warning: {w}" for w in doc["warnings"]]
    for g in doc["by_mode"]:
        sp = "" if g["speedup"] is None else f", speedup of medians {g['speedup']:.2f}"
        lines.append(f"repeats: {g['sweep_id']} {g['mode']}: median {g['median']:.1f} samples/s over {g['repeats']} "
                     f"runs (min {g['min']:.1f}, max {g['max']:.1f}, spread {g['spread_pct']:.1f}%){sp}")
    return lines
