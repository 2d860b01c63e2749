"""The anatomy of a step: where a profiled run's milliseconds go, the bars drawn alike for every
run, and the sentences that read them with each run's own numbers.

Reads what the trainer wrote with ``--profile-steps`` (docs/contracts.md section 2, "profile/"):
``breakdown.json`` and the per-rank traces. Per run one bar of the step's phases (adding up to the
step; DataParallel's scatter, replicate and gather carved out of forward), one of its communication
(waited for, and hidden behind computation; an fsdp run's split into its all-gathers in forward,
in backward and its reduce-scatters, ``split_segments``), and a straggling rank's phases when the
ranks' busy time differs by over 10 %.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from lab.engine.spec.modes import DDP, DP, sharded
from lab.runfolder import BREAKDOWN_JSON, PROFILE_DIR, read_json
from lab.views import charts

CAPTION = "Anatomy of a step"
INTRO = (
    "Milliseconds per step over each profiled run's window of steps (its breakdown.json). A run's "
    "phases "
    "add up to its step (DataParallel's scatter, replicate and gather drawn out of its forward). "
    "Its "
    "communication bar runs at the same time as those phases: the hatched part ran "
    "hidden behind computation (DDP all-reduces gradient buckets while backward goes on), the "
    "solid part is "
    "time the step waited for it; an fsdp run's is split into its all-gathers in forward and in "
    "backward and its reduce-scatters. On the CPU the waited-for part is an upper bound: idle "
    "Python between "
    "operations counts as waiting."
)
NOT_PROFILED = (
    "Not profiled: {names}. Launch with Profile steps (e.g. 20:25) to see where their steps go."
)
STRAGGLER_SPREAD = 0.10  # ranks differ when the slowest is busy over 10 % longer than the fastest
DP_PHASES = ("dp_scatter", "dp_replicate", "dp_gather")
# breakdown.json's split of an fsdp run's communication, each as <key>_exposed and <key>_hidden
SPLIT = {
    "comm_all_gather_fwd": "all-gathers in forward",
    "comm_all_gather_bwd": "all-gathers in backward",
    "comm_reduce_scatter": "reduce-scatters",
}
SPLIT_KEYS = tuple(f"{k}_{part}" for k in SPLIT for part in ("exposed", "hidden"))
REST_MIN_MS = 0.01  # what the rounded split leaves of comm below this is rounding, not a collective


@dataclass(frozen=True)
class Segment:
    """One kind of segment: how the legend names it, its colour and fill pattern ("" = solid)."""

    name: str
    colour: str
    pattern: str = ""


SEGMENTS: dict[str, Segment] = {
    "data": Segment("data", "#8c8c8c"),
    "forward": Segment("forward", "#4c78a8"),
    "dp_scatter": Segment("DP scatter", "#f58518"),
    "dp_replicate": Segment("DP replicate", "#e45756"),
    "dp_gather": Segment("DP gather", "#ff9da6"),
    "backward": Segment("backward", "#54a24b"),
    "optimizer": Segment("optimizer", "#b279a2"),
    "other": Segment("other", "#d8d8d8"),
    # an fsdp run's communication: all-gathers in forward and backward (darker forward and backward
    # hues), reduce-scatters; other collectives stay in the two below
    "comm_all_gather_fwd_exposed": Segment("all-gather in forward, waited for", "#1f4e79"),
    "comm_all_gather_fwd_hidden": Segment("all-gather in forward, hidden", "#1f4e79", "/"),
    "comm_all_gather_bwd_exposed": Segment("all-gather in backward, waited for", "#2f6b2a"),
    "comm_all_gather_bwd_hidden": Segment("all-gather in backward, hidden", "#2f6b2a", "/"),
    "comm_reduce_scatter_exposed": Segment("reduce-scatter, waited for", "#b35806"),
    "comm_reduce_scatter_hidden": Segment("reduce-scatter, hidden", "#b35806", "/"),
    "comm_exposed": Segment("communication, waited for", "#9d2b2b"),
    "comm_hidden": Segment("communication, hidden", "#9d2b2b", "/"),
}
_TRACE = re.compile(r"^trace_rank(\d+)\.json\.gz$")
_SNAPSHOT = re.compile(r"^memory_snapshot_rank(\d+)\.pickle$")
SNAPSHOT_VIEWER = "https://pytorch.org/memory_viz"


@dataclass(frozen=True)
class Bar:
    """One bar: ``kind`` is ``step`` (phases), ``comm`` (exposed + hidden) or ``slowest`` (a
    straggling rank)."""

    key: str
    kind: str
    ms: dict[str, float]
    rank: int | None = None


def _number(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v else 0.0


def breakdown(run_dir: Path | str, summary: Mapping[str, Any] | None = None) -> dict | None:
    """A run's breakdown.json, or None when it was not profiled (or the file is not in the
    contract's shape)."""
    run_dir = Path(run_dir).resolve()
    pointed = ((summary or {}).get("profile") or {}).get("breakdown")
    path = (run_dir / (pointed if isinstance(pointed, str) else BREAKDOWN_JSON)).resolve()
    if not path.is_relative_to(run_dir):  # a summary pointing out of its folder is not followed
        return None
    data = read_json(path)
    ok = (
        isinstance(data, dict)
        and isinstance(data.get("phases_ms"), dict)
        and _number(data.get("step_ms")) > 0
    )
    return data if ok else None


def _rank_files(run_dir: Path | str, pattern: re.Pattern[str]) -> list[tuple[int, Path]]:
    folder = Path(run_dir) / PROFILE_DIR
    found = [(int(m.group(1)), p) for p in folder.glob("*") if (m := pattern.match(p.name))]
    return sorted(found)


def trace_files(run_dir: Path | str) -> list[tuple[int, Path]]:
    """``(rank, path)`` of every rank's trace written so far, by rank."""
    return _rank_files(run_dir, _TRACE)


def trace_downloads(run_dir: Path | str, run_id: str) -> list[tuple[str, str, Path]]:
    """``(button label, file name, path)`` per rank's trace, the file named after the run so
    downloads do not clash."""
    return [
        (f"rank {rank} trace", f"{run_id}-{path.name}", path) for rank, path in trace_files(run_dir)
    ]


def snapshot_downloads(run_dir: Path | str, run_id: str) -> list[tuple[str, str, Path]]:
    """``(button label, file name, path)`` per rank's CUDA memory snapshot (the trainer's
    ``--memory-snapshot N``: ``profile/memory_snapshot_rank<i>.pickle``), by rank, named after the
    run; each opens at ``SNAPSHOT_VIEWER``."""
    return [
        (f"rank {rank} memory", f"{run_id}-{path.name}", path)
        for rank, path in _rank_files(run_dir, _SNAPSHOT)
    ]


def step_segments(phases: Mapping[str, Any]) -> dict[str, float]:
    """The step's phases in ``SEGMENTS`` order, DP's three carved out of forward; they add up to the
    phases'."""
    dp = {k: _number(phases.get(k)) for k in DP_PHASES}
    forward = _number(phases.get("forward"))
    carved = min(sum(dp.values()), forward)  # CPU-side DP ranges lie inside forward
    scale = carved / sum(dp.values()) if sum(dp.values()) else 0.0
    out = {"data": _number(phases.get("data")), "forward": forward - carved}
    out.update({k: v * scale for k, v in dp.items()})
    out.update({k: _number(phases.get(k)) for k in ("backward", "optimizer", "other")})
    return out


def comm_segments(phases: Mapping[str, Any]) -> dict[str, float]:
    """Communication per step: what the step waited for, and the rest of it, hidden behind
    computation."""
    total, exposed = _number(phases.get("comm_total")), _number(phases.get("comm_exposed"))
    return {
        "comm_exposed": min(exposed, total) if total else exposed,
        "comm_hidden": max(total - exposed, 0.0),
    }


def split_segments(phases: Mapping[str, Any]) -> dict[str, float] | None:
    """An fsdp run's communication per step by kind (``SPLIT_KEYS``), with what other collectives
    took as ``comm_exposed``/``comm_hidden``; None where the breakdown has no split (no fsdp
    collectives, or written before the split was)."""
    got = {k: _number(phases.get(k)) for k in SPLIT_KEYS}
    if not sum(got.values()):
        return None
    whole = comm_segments(phases)
    rest = {
        f"comm_{part}": whole[f"comm_{part}"] - sum(got[f"{k}_{part}"] for k in SPLIT)
        for part in ("exposed", "hidden")
    }
    return {**got, **{k: v if v >= REST_MIN_MS else 0.0 for k, v in rest.items()}}


def busy_ms(rank: Mapping[str, Any]) -> float:
    """A rank's step time less the communication it waited for: the time it computed."""
    return _number(rank.get("step_ms")) - _number((rank.get("phases_ms") or {}).get("comm_exposed"))


def straggler(data: Mapping[str, Any]) -> tuple[dict, dict, float] | None:
    """``(slowest rank, fastest rank, spread)`` when the ranks' busy times differ by over
    ``STRAGGLER_SPREAD``."""
    ranks = [
        r
        for r in data.get("per_rank") or []
        if isinstance(r, dict) and isinstance(r.get("phases_ms"), dict)
    ]
    if len(ranks) < 2:
        return None
    slow, fast = max(ranks, key=busy_ms), min(ranks, key=busy_ms)
    if busy_ms(fast) <= 0:
        return None
    spread = busy_ms(slow) / busy_ms(fast) - 1.0
    return (slow, fast, spread) if spread > STRAGGLER_SPREAD else None


def run_bars(key: str, data: Mapping[str, Any]) -> list[Bar]:
    """A profiled run's bars: its step, its communication (when it had any), its slowest rank (when
    it straggles)."""
    phases = data.get("phases_ms") or {}
    bars = [Bar(key, "step", step_segments(phases))]
    comm = split_segments(phases) or comm_segments(phases)
    if sum(comm.values()) > 0:
        bars.append(Bar(key, "comm", comm))
    found = straggler(data)
    if found:
        bars.append(
            Bar(key, "slowest", step_segments(found[0]["phases_ms"]), int(found[0].get("rank", 0)))
        )
    return bars


def comm_share(data: Mapping[str, Any] | None) -> float | None:
    """Exposed communication as a percentage of the step; None for a run not profiled."""
    if not data:
        return None
    return (
        100.0
        * _number((data.get("phases_ms") or {}).get("comm_exposed"))
        / _number(data.get("step_ms"))
    )


def row_label(name: str, bar: Bar) -> str:
    """How a bar's row is named: the run, its communication, or its slowest rank."""
    if bar.kind == "comm":
        return f"{name} · communication"
    if bar.kind == "slowest":
        return f"{name} · rank {bar.rank} (slowest)"
    return name


def figure(profiles: Sequence[tuple[str, dict | None]]) -> go.Figure | None:
    """The stacked bars of every profiled run, ``profiles`` being ``(name, breakdown or None)``
    per run (None when none was profiled)."""
    bars = [b for name, data in profiles if data for b in run_bars(name, data)]
    if not bars:
        return None
    rows = [row_label(b.key, b) for b in bars]
    values = {SEGMENTS[k].name: [b.ms.get(k) for b in bars] for k in SEGMENTS}
    return charts.stacked_bar_figure(
        rows,
        values,
        x_title="ms per step",
        colours={s.name: s.colour for s in SEGMENTS.values()},
        patterns={s.name: s.pattern for s in SEGMENTS.values() if s.pattern},
    )


def _pct(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole > 0 else "–"


def _mode_sentence(name: str, data: Mapping[str, Any]) -> str:
    step, p = float(data["step_ms"]), data.get("phases_ms") or {}
    seg, comm = step_segments(p), comm_segments(p)
    exposed, hidden = comm["comm_exposed"], comm["comm_hidden"]
    mode, world = data.get("effective_mode"), data.get("world_size") or 1
    dp = sum(seg[k] for k in DP_PHASES)
    if mode == DDP:
        text = (
            f"**{name}** (DDP, {world} ranks) waits {exposed:.1f} ms per step on all-reduce, "
            f"{_pct(exposed, step)} of its {step:.1f} ms step"
        )
        return text + (
            f"; another {hidden:.1f} ms of all-reduce ran hidden behind backward"
            if hidden >= 0.05
            else ""
        )
    split = split_segments(p) if sharded(mode) else None
    if split:
        return _sharded_sentence(name, world, step, split)
    if mode == DP and dp > 0:
        text = (
            f"**{name}** (DataParallel over {world} devices) spends {seg['dp_scatter']:.1f} ms "
            "per step "
            f"scattering the batch, {seg['dp_replicate']:.1f} ms replicating the model and "
            f"{seg['dp_gather']:.1f} ms gathering the outputs on device 0: {_pct(dp, step)} of its "
            f"{step:.1f} ms step, all from one Python process"
        )
        return text + (f"; it waits {exposed:.1f} ms on communication" if exposed >= 0.05 else "")
    if exposed + hidden > 0:
        return (
            f"**{name}** waits {exposed:.1f} ms per step on communication, {_pct(exposed, step)} "
            "of its "
            f"{step:.1f} ms step"
        )
    return (
        f"**{name}** communicates nothing: of its {step:.1f} ms step, forward takes "
        f"{seg['forward']:.1f} ms, "
        f"backward {seg['backward']:.1f} ms and the optimizer {seg['optimizer']:.1f} ms"
    )


def _sharded_sentence(name: str, world: int, step: float, split: Mapping[str, float]) -> str:
    """An fsdp run's communication read by kind: what the step waited for on each, then what ran
    hidden."""
    waits = [
        f"{split[f'{k}_exposed']:.1f} ms on {words}"
        for k, words in SPLIT.items()
        if split[f"{k}_exposed"] >= 0.05
    ]
    exposed = sum(split[f"{k}_exposed"] for k in SPLIT) + split["comm_exposed"]
    hidden = sum(split[f"{k}_hidden"] for k in SPLIT) + split["comm_hidden"]
    listed = ", ".join(waits[:-1]) + f" and {waits[-1]}" if len(waits) > 1 else "".join(waits)
    text = (
        f"**{name}** (FSDP, {world} ranks) waits {listed or '0.0 ms on its collectives'} per "
        f"step, {_pct(exposed, step)} of its {step:.1f} ms step"
    )
    if split["comm_exposed"] >= 0.05:
        text += f" (with {split['comm_exposed']:.1f} ms on other collectives)"
    return text + (
        f"; another {hidden:.1f} ms of its communication ran hidden behind computation"
        if hidden >= 0.05
        else ""
    )


def sentence(name: str, data: Mapping[str, Any]) -> str:
    """One profiled run read aloud with its own numbers, its note and its straggler included."""
    text = _mode_sentence(name, data)
    if data.get("note"):
        text += f" ({str(data['note']).rstrip('.')})"
    text += "."
    found = straggler(data)
    if found:
        slow, fast, spread = found
        text += (
            f" Its ranks differ: rank {slow.get('rank')} computes {busy_ms(slow):.1f} ms "
            "per step "
            f"against {busy_ms(fast):.1f} ms on rank {fast.get('rank')} ({spread:.0%} "
            "longer), and "
            f"the others wait for it at every {_waits_at(data.get('effective_mode'))}: its bar "
            "is drawn beside."
        )
    return text


def _waits_at(mode: Any) -> str:
    """Where the other ranks meet a straggler: DDP's all-reduces, FSDP's every collective."""
    return "all-gather and reduce-scatter" if sharded(mode) else "all-reduce"


def explain(profiles: Sequence[tuple[str, dict | None]]) -> list[str]:
    """The bars read with the runs' numbers (``profiles``: ``(name, breakdown or None)`` per run):
    one sentence per profiled run, then those not profiled."""
    out = [sentence(name, data) for name, data in profiles if data]
    missing = [name for name, data in profiles if not data]
    if out and missing:
        out.append(NOT_PROFILED.format(names=", ".join(missing)))
    return out
