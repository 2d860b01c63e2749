"""The anatomy of a step: where a profiled run's milliseconds go, as bars drawn alike for every run.

Reads what the trainer wrote with ``--profile-steps`` (docs/contracts.md
section 2, "profile/"): ``breakdown.json`` (found through summary.json's
``profile.breakdown``, else at its usual place while the run goes on) and the
per-rank traces. It owns the bars: per run one bar of the step's phases,
which add up to the step (data, forward, DataParallel's scatter, replicate
and gather carved out of forward, backward, optimizer, other), one bar of its
communication split into the part the step waited for (``comm_exposed``) and
the part hidden behind computation, and, when the ranks' busy time (step
minus exposed communication) differs by over 10 %, the slowest rank's phases
beside it (a straggler). Segments keep one name, colour and order for every
run (``SEGMENTS``). The figure and the sentences that read it with the runs'
own numbers are ``lab.views.compare.anatomy_text``'s. Tested by tests/test_anatomy.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.runfolder import BREAKDOWN_JSON, PROFILE_DIR, read_json

STRAGGLER_SPREAD = 0.10  # ranks differ when the slowest is busy over 10 % longer than the fastest
DP_PHASES = ("dp_scatter", "dp_replicate", "dp_gather")


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
    "comm_exposed": Segment("communication, waited for", "#9d2b2b"),
    "comm_hidden": Segment("communication, hidden", "#9d2b2b", "/"),
}
_TRACE = re.compile(r"^trace_rank(\d+)\.json\.gz$")


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


def trace_files(run_dir: Path | str) -> list[tuple[int, Path]]:
    """``(rank, path)`` of every rank's trace written so far, by rank."""
    folder = Path(run_dir) / PROFILE_DIR
    found = [
        (int(m.group(1)), p)
        for p in folder.glob("trace_rank*.json.gz")
        if (m := _TRACE.match(p.name))
    ]
    return sorted(found)


def trace_downloads(run_dir: Path | str, run_id: str) -> list[tuple[str, str, Path]]:
    """``(button label, file name, path)`` per rank's trace, the file named after the run so
    downloads do not clash."""
    return [
        (f"rank {rank} trace", f"{run_id}-{path.name}", path) for rank, path in trace_files(run_dir)
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
    comm = comm_segments(phases)
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
