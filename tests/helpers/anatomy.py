"""A step's anatomy written into a run: a DDP breakdown."""

from __future__ import annotations

import json
from pathlib import Path

ZERO = dict(dp_scatter=0.0, dp_replicate=0.0, dp_gather=0.0, comm_total=0.0, comm_exposed=0.0)


DDP = {
    **ZERO,
    "data": 0.08,
    "forward": 0.87,
    "backward": 4.69,
    "optimizer": 0.2,
    "comm_total": 4.1,
    "comm_exposed": 3.1,
    "other": 0.16,
}  # step 6.0


def write_breakdown(
    run_dir: Path,
    *,
    mode: str,
    world: int,
    step: float,
    phases: dict,
    per_rank=None,
    note=None,
    pointer: str | None = "profile/breakdown.json",
    traces: int = 0,
) -> dict:
    data = {
        "steps": [20, 25],
        "step_ms": step,
        "phases_ms": phases,
        "per_rank": per_rank or [{"rank": 0, "step_ms": step, "phases_ms": phases}],
        "device": "cpu",
        "effective_mode": mode,
        "world_size": world,
        "traces": [f"profile/trace_rank{i}.json.gz" for i in range(traces)],
        "note": note,
    }
    (run_dir / "profile").mkdir(exist_ok=True)
    (run_dir / "profile" / "breakdown.json").write_text(json.dumps(data))
    for i in range(traces):
        (run_dir / "profile" / f"trace_rank{i}.json.gz").write_bytes(b"\x1f\x8b" + bytes([i]))
    if pointer is not None:
        summary = json.loads((run_dir / "summary.json").read_text())
        summary["profile"] = {"breakdown": pointer}
        (run_dir / "summary.json").write_text(json.dumps(summary))
    return data
