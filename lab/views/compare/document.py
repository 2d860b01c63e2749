"""``python -m lab compare RUN… [--baseline RUN] [--throughput-tag TAG] [--json]``: the Compare
table for a terminal.

Owns which runs a command line names (run ids, sweep ids meaning all their
runs, or folders: a run folder, or foreign logs; ``resolve``), the
comparison as JSON (``comparison``: per run its ``figures`` (measured or
derived), ``throughput`` spread and what it is of, ``steps_per_sec``,
``speedup`` and ``efficiency`` as ``{"value", "ci_low", "ci_high",
"within_noise"}`` with ``speedup_of``, ``wall_time_s``, ``peak_mem_mib``
(and ``peak_mem_of``), the verdict and the supervisor's ``interference``;
top-level ``baseline``, ``throughput_tag``, ``warnings`` (fairness, derived
figures and busy machine) and ``by_mode`` (each mode's median over a sweep's
repeats)) and the same as text lines (``text``). The figures are those of
``lab.views.compare.table``, ``lab.views.compare.derived``, ``lab.views.compare.noise`` and
``lab.views.compare.repeats``. Tested by tests/test_noise.py,
tests/test_noise_runs.py and tests/test_compare_script_runs.py (real runs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from lab.engine.registry import RunNotFound, get_run, list_runs
from lab.events import LogdirReader
from lab.runfolder import SWEEPS_DIR, check_run_id, read_json
from lab.views.compare import derived, fairness, noise
from lab.views.compare import repeats as compare_repeats
from lab.views.compare import table as compare
from lab.views.compare.runs import CompareRun, from_record, labels, load_folder
from lab.views.compare.speed import Speed
from lab.views.compare.spread import Ratio, Spread
from lab.views.runscalars import folder_scalars


def _sweep_run_ids(sweep_id: str, root: Path) -> list[str]:
    sweep = read_json(root / SWEEPS_DIR / f"{check_run_id(sweep_id)}.json") or {}
    ids = list(sweep.get("run_ids") or [])
    if not ids:  # the sweep file is gone: its runs still say which sweep they were
        ids = [
            r.run_id
            for r in sorted(list_runs(root), key=lambda r: r.created_at or "")
            if r.sweep_id == sweep_id
        ]
    if not ids:
        raise RunNotFound(
            f"no sweep {sweep_id!r} in {root}: see `python -m lab status` for the run ids"
        )
    return ids


def _folder(name: str) -> CompareRun:
    run = load_folder(Path(name))
    if run is None:
        raise RunNotFound(
            f"{name} holds no run and no event files: name a run id, a sweep id, a run folder, "
            "or a folder of TensorBoard event files"
        )
    return run


def resolve(names: Sequence[str], root: Path) -> list[CompareRun]:
    """The runs named by run ids, sweep ids (a sweep: all its runs, in its order) or folders, each
    once."""
    out: list[CompareRun] = []
    for name in names:
        if "/" in name or name in (".", ".."):  # a path: a run folder anywhere, or foreign logs
            found = [_folder(name)]
        else:
            found = [
                from_record(get_run(rid, root))
                for rid in (_sweep_run_ids(name, root) if name.startswith("sweep-") else [name])
            ]
        out += [r for r in found if r.key not in {o.key for o in out}]
    return out


def load_scalars(runs: Sequence[CompareRun]) -> dict[str, dict[str, Any]]:
    """Each run's event series by key, read from its folders (a script's linked ones too)."""
    return {r.key: folder_scalars(r.event_folders, LogdirReader) for r in runs}


def tag_problem(tag: str | None, scalars: Mapping[str, Mapping[str, Any]]) -> str | None:
    """Why ``--throughput-tag`` cannot be used (no chosen run logs it), naming the choices; None
    when it can."""
    offered = derived.throughput_options(scalars)
    if tag is None or tag in offered:
        return None
    return (
        f"--throughput-tag {tag}: none of these runs logs it; choose one of "
        f"{', '.join(offered[:12])}"
        f"{' …' if len(offered) > 12 else ''} ({derived.STEP_RATE}: steps/s of the loss tag)"
    )


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
        return {"median": s.median, "ci_low": s.ci_low, "ci_high": s.ci_high, "windows": s.windows}
    return (
        None
        if value is None
        else {"median": value, "ci_low": None, "ci_high": None, "windows": None}
    )


def _run_json(r: CompareRun, m: dict, sp: Speed, is_baseline: bool) -> dict[str, Any]:
    rat = sp.ratio
    return {
        "run_id": r.run_id,
        "name": r.name,
        "kind": r.kind,
        "figures": m["figures"],
        "mode": m["mode"],
        "effective_mode": m["effective mode"],
        "devices": m["devices"],
        "sweep_id": r.sweep_id,
        "throughput": _spread_json(m["spread"], None),
        "throughput_of": m["throughput of"],
        "steps_per_sec": _spread_json(m["steps spread"], m["steps/s"]),
        "loss_tag": m["loss tag"],
        "speedup_of": sp.of,
        "speedup": _ratio_json(rat, sp.speedup),
        "efficiency": _ratio_json(
            rat.scaled(sp.factor) if rat else None,
            None if sp.speedup is None else sp.speedup * sp.factor,
        ),
        "wall_time_s": m["wall time"],
        "peak_mem_mib": m["peaks"],
        "peak_mem_of": m["peaks of"],
        "verdict": noise.verdict(rat, is_baseline),
        "interference": noise.run_interference(r),
    }


def comparison(
    runs: Sequence[CompareRun],
    baseline_key: str | None = None,
    scalars: Mapping[str, Mapping[str, Any]] | None = None,
    throughput_tag: str | None = None,
) -> dict[str, Any]:
    """The comparison as the ``compare --json`` document (see the module docstring).

    ``throughput_tag``: the throughput of runs without summary.json (``lab.views.compare.derived``);
    by default the first of ``derived.throughput_options`` of those runs (None when every run has a
    summary)."""
    keys = {r.key for r in runs}
    baseline_key = baseline_key if baseline_key in keys else compare.choose_baseline(runs)
    sc = scalars or {}
    throughput_tag = throughput_tag or derived.default_throughput(runs, sc)
    metrics = {r.key: compare.run_metrics(r, sc.get(r.key), throughput_tag) for r in runs}
    base = metrics[baseline_key]
    warnings = fairness.fairness_warnings(
        runs, baseline_key, sc, throughput_tag
    ) + noise.busy_warnings(runs)
    return {
        "baseline": next(r.run_id for r in runs if r.key == baseline_key),
        "throughput_tag": throughput_tag,
        "runs": [
            _run_json(r, m, compare.run_speed(m, base), r.key == baseline_key)
            for r, m in ((r, metrics[r.key]) for r in runs)
        ],
        "warnings": [w.message for w in warnings],
        "by_mode": compare_repeats.by_mode(runs, scalars, baseline_key),
    }


def _tp_text(t: dict | None) -> str:
    return "–" if not t else f"{t['median']:.1f} ({t['ci_low']:.1f}–{t['ci_high']:.1f})"


def _steps_text(t: dict | None) -> str:
    if not t:
        return "–"
    return f"{t['median']:.3g}" + (
        "" if t["ci_low"] is None else f" ({t['ci_low']:.3g}–{t['ci_high']:.3g})"
    )


def text(doc: Mapping[str, Any], runs: Sequence[CompareRun]) -> list[str]:
    """The comparison as lines for a terminal: the table, the warnings, the repeats."""
    names = {r.run_id: labels(runs)[r.key] for r in runs}  # a folder's run id is its name
    rows = []
    for r in doc["runs"]:
        sp, eff = r["speedup"], r["efficiency"]
        rows.append(
            {
                "run": names[r["run_id"]],
                "figures": r["figures"],
                "mode": r["mode"],
                "throughput (samples/s)": _tp_text(r["throughput"]),
                "steps/s": _steps_text(r.get("steps_per_sec")),
                "speedup of": r["speedup_of"] or "–",
                "speedup": "–"
                if sp is None
                else (Ratio(**sp).text() if sp["ci_low"] is not None else f"{sp['value']:.2f}×"),
                "efficiency": "–"
                if eff is None
                else (
                    f"{eff['value']:.2f} ({eff['ci_low']:.2f}–{eff['ci_high']:.2f})"
                    if eff["ci_low"] is not None
                    else f"{eff['value']:.2f}"
                ),
                "noise": r["verdict"] or "–",
                "machine": "–"
                if r["interference"] is None
                else ("busy" if r["interference"].get("busy") else "quiet"),
            }
        )
    lines = [
        f"baseline: {names[doc['baseline']]} ({doc['baseline']})",
        pd.DataFrame(rows).to_string(index=False),
    ]
    lines += [f"warning: {w}" for w in doc["warnings"]]
    for g in doc["by_mode"]:
        sp = "" if g["speedup"] is None else f", speedup of medians {g['speedup']:.2f}"
        lines.append(
            f"repeats: {g['sweep_id']} {g['mode']}: median {g['median']:.1f} samples/s over "
            f"{g['repeats']} "
            f"runs (min {g['min']:.1f}, max {g['max']:.1f}, spread {g['spread_pct']:.1f}%){sp}"
        )
    return lines
