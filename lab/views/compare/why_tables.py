"""Two tables the Compare page draws beside the anatomy bars: what each profiled run's collectives
moved (``collectives`` of its breakdown.json: per rank and kind, DDP's all-reduces as an fsdp run's
all-gathers and reduce-scatters, calls, bytes, time and nccl-tests' bandwidths per step), and a
knob sweep's values side by side (``Comparison.by_value``: throughput with its interval, speedup
against the first value with its verdict, and the anatomy's step and exposed communication where
the runs were profiled)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from lab.views.compare.comparison import Comparison

COLLECTIVES_CAPTION = "Collectives per profiled step"
COLLECTIVES_INTRO = (
    "Per rank and kind: calls, bytes and time per profiled step, with nccl-tests' algorithm and "
    "bus bandwidth (busbw = algbw × 2(n−1)/n for all-reduce, × (n−1)/n for all-gather and "
    "reduce-scatter, whose bytes are the gathered output and the reduced input: an fsdp run's "
    "units' parameters), in GB/s. On the CPU gloo runs a reduce-scatter as an all-reduce of the "
    "whole input, so its time is an all-reduce's."
)
BY_VALUE_CAPTION = "Each value of the varied option"


def collectives_frame(c: Comparison) -> pd.DataFrame | None:
    """A row per run, rank and collective kind; None when no chosen run recorded collectives."""
    rows = []
    for r in c.rows:
        for k in (r.figures.profile or {}).get("collectives") or []:
            rows.append(
                {
                    "run": r.name,
                    "rank": k.get("rank"),
                    "op": k.get("op"),
                    "calls": k.get("calls"),
                    "MiB": round(float(k.get("bytes") or 0) / 2**20, 3),
                    "ms": k.get("total_ms"),
                    "algbw GB/s": k.get("algbw_gbps"),
                    "busbw GB/s": k.get("busbw_gbps"),
                }
            )
    return pd.DataFrame(rows) if rows else None


def _interval(d: Mapping[str, Any] | None, centre: str, fmt: str) -> str:
    if not d:
        return "–"
    cov = f", {d['coverage_text']}" if d.get("coverage_text") else ""
    return f"{d[centre]:{fmt}} ({d['ci_low']:{fmt}}–{d['ci_high']:{fmt}}{cov})"


def by_value_frame(c: Comparison) -> pd.DataFrame | None:
    """A row per varied option and value; None without a knob sweep."""
    rows = []
    for flag, groups in (c.by_value or {}).items():
        for g in groups:
            rows.append(
                {
                    "option": flag,
                    "value": g["value"],
                    "with": g.get("with"),
                    "runs": len(g.get("runs") or []),
                    "throughput": _interval(g.get("throughput"), "median", ".1f"),
                    "speedup": _interval(g.get("speedup"), "value", ".2f"),
                    "verdict": g.get("verdict"),
                    "step ms": g.get("step_ms"),
                    "exposed comm ms": g.get("comm_exposed_ms"),
                }
            )
    return pd.DataFrame(rows) if rows else None
