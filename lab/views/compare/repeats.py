"""Repeats of a sweep: the runs of one sweep and asked mode grouped, and per group the median of the
runs' median throughputs, the range across the repeats and the speedup of that median against the
baseline's group with its interval over the pairs of runs and the verdict (``verdict``): the
between-run noise that one run's interval cannot show.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lab.engine.spec.modes import DP, torchrun
from lab.engine.spec.sweep import WEAK
from lab.views.compare.figures import run_spread
from lab.views.compare.runs import CompareRun
from lab.views.compare.spread import over_repeats
from lab.views.compare.verdict import BASELINE, compare_groups, margins_of


def asked_mode(run: CompareRun) -> str:
    """The asked mode; a weak-scaling run of a sweep is a mode of its own (it trains a different
    global batch)."""
    mode = str((run.summary or {}).get("mode") or run.option("mode") or "?")
    return f"{mode} (weak)" if run.scaling == WEAK else mode


def _mode(run: CompareRun) -> str:
    """The asked mode, and a knob sweep's values (``ddp bucket-cap-mb=25``): each value's runs are
    a group of their own."""
    return f"{asked_mode(run)} {run.varied_text}".strip()


def devices(run: CompareRun) -> int:
    """The devices a run split its work over: DDP's and FSDP's processes x nodes; DP's GPUs (2+)
    as the run really had them (summary.json's ``devices``, else ``gpus``, else a Slurm job's
    ``gpus_per_node``: a Slurm config names no GPUs), else 1."""
    mode = str(run.option("mode") or "")
    if torchrun(mode):
        return int(run.option("nproc") or 1) * int(run.option("nnodes") or 1)
    if mode != DP:
        return 1
    had = (run.summary or {}).get("devices")
    if isinstance(had, list) and had:
        n = len(had)
    else:
        gpus = run.option("gpus")
        n = len(gpus) if isinstance(gpus, (list, tuple)) else 0
        n = n or int(run.option("gpus_per_node") or 0)
    return n if n >= 2 else 1


def on_gpus(run: CompareRun) -> bool:
    """Whether the run trained on GPUs (summary.json's ``devices``, else its options)."""
    had = (run.summary or {}).get("devices")
    if isinstance(had, list) and had:
        return any(str(d).startswith("cuda") for d in had)
    return bool(run.option("gpus") or run.option("gpus_per_node"))


def groups(runs: Sequence[CompareRun]) -> dict[tuple[str, str], list[CompareRun]]:
    """(sweep id, asked mode) -> its runs, in the given order; runs outside a sweep are left out."""
    counts: dict[tuple[str, str], set[int]] = {}
    for r in runs:
        counts.setdefault((r.sweep_id or "", _mode(r)), set()).add(devices(r))
    out: dict[tuple[str, str], list[CompareRun]] = {}
    for r in runs:
        if r.sweep_id:
            mode = _mode(r)
            # a device-count sweep: each count of a mode is a group of its own
            label = f"{mode} x{devices(r)}" if len(counts[(r.sweep_id, mode)]) > 1 else mode
            out.setdefault((r.sweep_id, label), []).append(r)
    return out


def by_mode(
    runs: Sequence[CompareRun],
    scalars: Mapping[str, Mapping[str, Any]] | None = None,
    baseline_key: str | None = None,
    margin: Any = None,
    found: Sequence[Any] = (),
) -> list[dict[str, Any]]:
    """Per sweep and mode: median over repeats, min, max, repeats, spread %, speedup, run ids, and
    against the baseline run's group ``ci_low``, ``ci_high``, ``coverage_text`` and ``verdict``
    (``verdict.compare_groups``, the cards' function and inputs): where a repeats group is one
    of the comparison's groups ``found`` (``groups.Group``), that group's own figures, so the cards,
    the rows and this table give one number per question.

    Empty unless some sweep ran a mode more than once. ``speedup`` divides the
    group's median by the median of the baseline run's group (None when the
    baseline is in no group).
    """
    margins = margins_of(margin)
    grouped = groups(runs)
    if not any(len(g) > 1 for g in grouped.values()):
        return []
    out = []
    for (sweep_id, mode), members in grouped.items():
        spreads = [run_spread(r, (scalars or {}).get(r.key)) for r in members]
        summary = over_repeats([s.median for s in spreads if s is not None])
        if summary is None:
            continue
        out.append(
            {
                "sweep_id": sweep_id,
                "mode": mode,
                **summary,
                "run_ids": [r.run_id for r in members],
                "keys": [r.key for r in members],
                "_values": [s.median for s in spreads if s is not None],
                "_devices": devices(members[0]),
            }
        )
    base = next((g for g in out if baseline_key in g["keys"]), None)
    for g in out:
        g["speedup"] = g["median"] / base["median"] if base and base["median"] else None
        same = next((x for x in found if set(x.keys) == set(g["keys"])), None)
        pct = margins.at(g.pop("_devices")).pct
        g.update(_against(g, base, pct) if same is None else _of_group(same))
    for g in out:
        del g["keys"], g["_values"]
    return out


def _of_group(group: Any) -> dict[str, Any]:
    return {
        "speedup": group.speedup if not group.is_baseline else 1.0,
        "ci_low": group.low,
        "ci_high": group.high,
        "coverage_text": group.coverage_text,
        "verdict": group.verdict,
    }


def _against(g: dict[str, Any], base: dict[str, Any] | None, margin_pct: float) -> dict[str, Any]:
    """The group's interval and verdict against the baseline's group."""
    if base is None:
        return {"ci_low": None, "ci_high": None, "coverage_text": None, "verdict": ""}
    if g is base:
        return {"ci_low": None, "ci_high": None, "coverage_text": None, "verdict": BASELINE}
    if len(base["_values"]) * len(g["_values"]) < 2:  # one run each: no run-to-run evidence
        return {"ci_low": None, "ci_high": None, "coverage_text": None, "verdict": ""}
    c = compare_groups(base["_values"], g["_values"], margin_pct)
    return {
        "ci_low": c.low,
        "ci_high": c.high,
        "coverage_text": c.coverage_text,
        "verdict": c.verdict,
    }
