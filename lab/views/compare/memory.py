"""Memory anatomy on Compare: each run's estimate beside its measured peak, per device.

Reads summary.json's ``memory`` (docs/contracts.md; written by training/memory.py): the estimate
by part (parameters, gradients, optimizer state, activations; DDP's buckets; under DP device 0's
extra: the replicas' gradients it sums, the input batch it scatters, the gathered outputs and the
loss) and the measured peak over its baseline. On CUDA the measured figure is the allocator's
peak; on the CPU it is how far the process's resident set rose from just before the model was
built, which also holds what the estimate leaves out (the backward's short-lived gradients, the
C library's kept heap, kernels paged in on first use): README.md states the factor the CPU's
figures keep to. Runs without a ``memory`` (older runs, scripts, foreign logs) have no rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from lab.views.compare.figures import device_order

CAPTION = "Memory: estimate against measured"
INTRO = (
    "Per device: what the lab's estimate says the run holds (parameters + gradients + optimizer "
    "state + a batch's activations, and under DP device 0's extra) beside what was measured: the "
    "allocator's peak on a GPU, the rise of the process's resident set on the CPU. A measured "
    "figure far above the estimate is memory the model's anatomy does not explain."
)
PART_NAMES = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer": "optimizer state",
    "activations": "activations",
    "buckets": "DDP buckets",
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
