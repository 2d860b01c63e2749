"""Memory anatomy on Compare: each run's estimate beside its measured peak, per device.

Reads summary.json's ``memory`` (docs/contracts.md; written by training/memory.py): the estimate
by part (parameters, gradients, optimizer state, activations; DDP's buckets; under DP device 0's
extra: the replicas' gradients it sums, the input batch it scatters, the gathered outputs and the
loss) and the measured peak over its baseline. On CUDA the measured figure is the allocator's
peak; on the CPU it is how far the process's resident set rose from just before the model was
built, which also holds what the estimate leaves out (the backward's short-lived gradients, the
C library's kept heap, kernels paged in on first use): README.md states the factor the CPU's
figures keep to. Runs without a ``memory`` (older runs, scripts, foreign logs) have no rows.
``intro`` says how the chosen runs were measured: a CPU run whose ``memory.cpu_allocator`` says
the trainer gave freed blocks back to the system (glibc's mmap threshold) has a peak that follows
what was live; an older CPU run's may also hold glibc's kept heap, which reads fsdp above DDP.

``frontier`` is the trade the modes make, one point per mode and device count: the peak memory
per device (the most loaded device's measured rise, the median over the group's runs; the estimate
where nothing was measured) against the steady-state throughput (the median of the runs' window
medians), so that "fsdp on 2 uses 41% of DDP's memory per device at 0.83x its speed" (``trade``)
can be read off the chart and is said in words beside it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from lab.engine.spec.modes import DDP, FSDP
from lab.views import charts
from lab.views.compare import modes
from lab.views.compare.figures import device_order

CAPTION = "Memory: estimate against measured"
INTRO = (
    "Per device: what the lab's estimate says the run holds (parameters + gradients + optimizer "
    "state + a batch's activations, and under DP device 0's extra) beside what was measured: the "
    "allocator's peak on a GPU, the rise of the process's resident set on the CPU. A measured "
    "figure far above the estimate is memory the model's anatomy does not explain."
)
LIVE_HEAP = (
    "On the CPU the resident set follows what is live: the trainer sets glibc's mmap threshold "
    "({kib} KiB, as MALLOC_MMAP_THRESHOLD_ does), so freed tensors go back to the system instead "
    "of staying in the C library's heap."
)
KEPT_HEAP = (
    "{runs}: recorded without it, so {their} CPU peak may also hold the C library's kept heap (an "
    "fsdp run's more than DDP's: it frees and gathers its blocks every step) unless the run's "
    "environment set MALLOC_MMAP_THRESHOLD_."
)
PART_NAMES = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer": "optimizer state",
    "activations": "activations",
    "buckets": "DDP buckets",
    "gathered": "all-gathered parameters in flight (FSDP)",
    "replica_gradients": "replicas' gradients (DP)",
    "input_batch": "input batch (DP scatter)",
    "gathered_outputs": "gathered outputs (DP)",
    "loss": "loss",
}
COLUMNS = ("run", "device", "estimate MiB", "measured MiB", "measured / estimate", "parts")


@dataclass(frozen=True)
class MemoryRow:
    run: str
    device: str
    estimate_mib: float
    measured_mib: float | None
    ratio: float | None
    parts: str  # "parameters 43 MiB + gradients 43 MiB + ..."


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _parts(est: Mapping[str, Any]) -> str:
    return " + ".join(
        f"{name} {est[k]:.1f}" for k, name in PART_NAMES.items() if (_num(est.get(k)) or 0) > 0
    )


def run_rows(label: str, summary: Mapping[str, Any] | None) -> list[MemoryRow]:
    """One run's rows, devices in order; [] without a usable ``memory``."""
    mem = (summary or {}).get("memory")
    if not isinstance(mem, dict) or not isinstance(mem.get("estimate_mib"), dict):
        return []
    peak, base = mem.get("peak_mib") or {}, mem.get("baseline_mib") or {}
    rows = []
    for dev in sorted(mem["estimate_mib"], key=device_order):
        est = mem["estimate_mib"][dev]
        total = _num(est.get("total")) if isinstance(est, dict) else None
        if total is None:
            continue
        p = _num(peak.get(dev))
        used = None if p is None else p - (_num(base.get(dev)) or 0.0)
        ratio = used / total if used is not None and total > 0 else None
        rows.append(MemoryRow(label, dev, total, used, ratio, _parts(est)))
    return rows


def _cpu_heap(summary: Mapping[str, Any] | None) -> tuple[bool, int | None] | None:
    """A CPU run's measure: (True, the mmap threshold) when the trainer set it, (False, None)
    when it did not; None for a GPU run or one without a ``memory``."""
    mem = (summary or {}).get("memory")
    if not isinstance(mem, dict) or not str(mem.get("measured") or "").startswith("cpu"):
        return None
    threshold = _num((mem.get("cpu_allocator") or {}).get("mmap_threshold"))
    return (True, int(threshold)) if threshold else (False, None)


def intro(runs: Sequence[Any], names: Mapping[str, str]) -> str:
    """``INTRO`` and how the chosen runs' CPU figures were measured (the module says why)."""
    heaps = {names.get(r.key, r.key): _cpu_heap(r.summary) for r in runs}
    live = sorted({h[1] for h in heaps.values() if h and h[0]})
    kept = [name for name, h in heaps.items() if h and not h[0]]
    words = [INTRO]
    if live:
        words.append(LIVE_HEAP.format(kib=", ".join(str(t // 1024) for t in live)))
    if kept:
        their = "their" if len(kept) > 1 else "its"
        words.append(KEPT_HEAP.format(runs=", ".join(kept), their=their))
    return " ".join(words)


def rows(runs: Sequence[Any], names: Mapping[str, str]) -> list[MemoryRow]:
    """Every run's rows (``CompareRun``s with ``key`` and ``summary``), labelled by ``names``."""
    return [row for r in runs for row in run_rows(names.get(r.key, r.key), r.summary)]


def frame(runs: Sequence[Any], names: Mapping[str, str]) -> pd.DataFrame | None:
    """The page's small table; None when no run has a ``memory``."""
    got = rows(runs, names)
    if not got:
        return None
    return pd.DataFrame(
        [
            (
                r.run,
                r.device,
                round(r.estimate_mib, 1),
                None if r.measured_mib is None else round(r.measured_mib, 1),
                None if r.ratio is None else round(r.ratio, 2),
                r.parts,
            )
            for r in got
        ],
        columns=list(COLUMNS),
    )


FRONTIER_CAPTION = "Memory per device against throughput"
FRONTIER_INTRO = (
    "One point per mode and device count: the most loaded device's peak (measured; the estimate "
    "where nothing was measured, drawn hollow) against the steady-state throughput. Down and to "
    "the right is better; sharding (fsdp) moves a point down at some cost in speed."
)


@dataclass(frozen=True)
class Point:
    mode: str
    devices: int
    throughput: float  # samples/s, the median of the group's runs
    memory_mib: float  # per device, the most loaded device
    measured: bool  # False: the estimate stands in
    runs: int


def _peak_per_device(summary: Mapping[str, Any]) -> tuple[float, bool] | None:
    """The most loaded device's measured rise, else its estimate; None without a ``memory``."""
    got = run_rows("", summary)
    measured = [r.measured_mib for r in got if r.measured_mib is not None]
    if measured:
        return max(measured), True
    return (max(r.estimate_mib for r in got), False) if got else None


def _throughput(summary: Mapping[str, Any]) -> float | None:
    median = (summary.get("throughput") or {}).get("median")
    value = median if _num(median) else summary.get("steady_throughput_samples_per_sec")
    return _num(value)


def frontier(runs: Sequence[Any]) -> list[Point]:
    """One ``Point`` per (mode, device count) of the runs with a memory record and a throughput,
    in the order of ``modes.MODES`` then devices."""
    groups: dict[tuple[str, int], list[tuple[float, float, bool]]] = {}
    for r in runs:
        s = r.summary or {}
        peak, speed = _peak_per_device(s), _throughput(s)
        mode = str(s.get("effective_mode") or s.get("mode") or "")
        if peak is None or speed is None or not mode:
            continue
        devices = int(s.get("world_size") or len(s.get("devices") or ()) or 1)
        groups.setdefault((mode, devices), []).append((speed, *peak))
    order = list(modes.MODE_COLOURS)
    return [
        Point(
            mode,
            n,
            statistics.median(g[0] for g in got),
            statistics.median(g[1] for g in got),
            all(g[2] for g in got),
            len(got),
        )
        for (mode, n), got in sorted(
            groups.items(),
            key=lambda kv: (order.index(kv[0][0]) if kv[0][0] in order else 9, kv[0]),
        )
    ]


def trade(points: Sequence[Point]) -> list[str]:
    """For each fsdp point with a ddp point of the same device count: its memory per device and
    its speed as shares of DDP's, in one sentence."""
    ddp = {p.devices: p for p in points if p.mode == DDP}
    out = []
    for p in points:
        base = ddp.get(p.devices)
        if p.mode != FSDP or base is None or base.memory_mib <= 0 or base.throughput <= 0:
            continue
        what = "memory per device" if p.measured and base.measured else "estimated memory"
        out.append(
            f"fsdp on {p.devices} uses {p.memory_mib / base.memory_mib:.0%} of DDP's {what} at "
            f"{p.throughput / base.throughput:.2f}x its speed."
        )
    return out


def frontier_view(runs: Sequence[Any]) -> tuple[go.Figure, str] | None:
    """The chart and its caption (the trade in words first), or None under two points."""
    points = frontier(runs)
    if len(points) < 2:
        return None
    return frontier_figure(points), " ".join([*trade(points), FRONTIER_INTRO])


def frontier_figure(points: Sequence[Point]) -> go.Figure:
    """The points in their modes' colours, labelled ``mode xN``; estimates drawn hollow."""
    fig = go.Figure()
    for p in points:
        fig.add_trace(
            go.Scatter(
                x=[p.throughput],
                y=[p.memory_mib],
                mode="markers+text",
                text=[f"{p.mode} x{p.devices}"],
                textposition="top center",
                name=f"{p.mode} x{p.devices}",
                marker=dict(
                    size=13,
                    color=modes.colour(p.mode),
                    symbol="circle" if p.measured else "circle-open",
                    line=dict(width=2, color=modes.colour(p.mode)),
                ),
                hovertemplate=(
                    f"{p.mode} on {p.devices}: %{{x:.0f}} samples/s, %{{y:.1f}} MiB per device "
                    f"({'measured' if p.measured else 'estimate'}; {p.runs} run"
                    f"{'s' * (p.runs != 1)})<extra></extra>"
                ),
            )
        )
    fig.update_xaxes(title_text="samples/s (steady state)")
    fig.update_yaxes(title_text="peak memory per device (MiB)", rangemode="tozero")
    fig = charts.base_layout(fig, None)
    fig.update_layout(showlegend=False, hovermode="closest")
    return fig
