"""What share of the checked link a profiled run's all-reduces reached.

A profiled DDP run's ``collectives`` (its breakdown.json, ``training.collectives``) give per rank
the all-reduce's bus bandwidth and bytes per call; the latest link check (``lab linkcheck``,
``lab.engine.linkcheck.latest``) of the same backend and world size, saved beside the run (its
runs folder's ``linkchecks/``), gives the bus bandwidth the link reached at each message size.
Only a check of the same GPUs, on one node (a check runs on one), with the same NCCL variables
(logging aside; summary.json's ``nccl_env``) is compared; where there is none, ``lines`` says so.
Where breakdown.json has ``collectives_min`` (each call's shortest duration over the ranks), its
row is used, else the ranks' rows. ``share`` sets the run's mean busbw over those rows against
the check's at the size nearest (in log scale) the run's mean bytes per call; ``lines`` says it
per run for the Compare page.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from lab.engine import linkcheck

WHY = (
    "A run's all-reduces are fewer, interleaved with compute and bucketed, so a share well below "
    "100% is usual; near 100% means the link, not the model, sets the pace of communication."
)


def _backend(summary: Mapping[str, Any] | None, devices: list[str]) -> str:
    b = (summary or {}).get("backend")
    if b:
        return str(b)
    return "nccl" if any("cuda" in d for d in devices) else "gloo"


def _all_reduces(profile: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    p = profile or {}
    return [
        r
        for r in p.get("collectives_min") or p.get("collectives") or []
        if r.get("op") == "all_reduce" and (r.get("calls") or 0) > 0 and r.get("busbw_gbps")
    ]


def share(
    profile: Mapping[str, Any] | None,
    backend: str,
    world_size: int,
    root: Path | str,
    gpus: list[int] | None = None,
    nnodes: int = 1,
    nccl_env: dict | None = None,
) -> dict[str, Any] | None:
    """``{"busbw_gbps", "message_bytes", "check_id", "check_bytes", "check_busbw_gbps",
    "share"}``, or None without all-reduces in ``profile`` or a matching check under ``root``:
    one node (a check runs on one), the same ``gpus`` and NCCL variables where given."""
    rows = _all_reduces(profile)
    if not rows or world_size < 2 or nnodes > 1:
        return None
    check = linkcheck.latest(root, backend, world_size, gpus, nccl_env)
    results = [r for r in (check or {}).get("results") or [] if r.get("busbw_gbps")]
    if not check or not results:
        return None
    busbw = sum(float(r["busbw_gbps"]) for r in rows) / len(rows)
    per_call = sum(float(r["bytes"]) / float(r["calls"]) for r in rows) / len(rows)
    near = min(results, key=lambda r: abs(math.log(r["bytes"]) - math.log(max(per_call, 1.0))))
    return {
        "busbw_gbps": round(busbw, 4),
        "message_bytes": round(per_call),
        "check_id": check.get("id"),
        "check_bytes": int(near["bytes"]),
        "check_busbw_gbps": float(near["busbw_gbps"]),
        "share": busbw / float(near["busbw_gbps"]),
    }


NONE = (
    "{name}: no link check of the same GPUs, one node and the same NCCL variables to compare its "
    "all-reduces with (lab linkcheck on those GPUs, with the run's NCCL variables)"
)


def _mib(n: float) -> str:
    return f"{n / 1024**2:.2f} MiB" if n >= 1024**2 else f"{n / 1024:.0f} KiB"


def sentence(name: str, s: Mapping[str, Any]) -> str:
    return (
        f"{name}: all-reduce at {s['busbw_gbps']:.3g} GB/s bus bandwidth "
        f"({_mib(s['message_bytes'])} a call), {s['share']:.0%} of the "
        f"{s['check_busbw_gbps']:.3g} GB/s the link check {s['check_id']} reached at "
        f"{_mib(s['check_bytes'])}"
    )


def lines(c: Any) -> list[str]:
    """One sentence per profiled run of the ``Comparison`` ``c`` with a link check to compare."""
    out = []
    for row in c.rows:
        f = row.figures
        if not f.profile or not f.world_size:
            continue
        run = row.run
        gpus = getattr(run, "option", lambda k: None)("gpus")
        s = share(
            f.profile,
            _backend(run.summary, f.devices),
            int(f.world_size),
            Path(run.run_dir).parent,
            list(gpus) if isinstance(gpus, (list, tuple)) else None,
            int(getattr(run, "option", lambda k: None)("nnodes") or 1),
            (run.summary or {}).get("nccl_env"),
        )
        if s is not None:
            out.append(sentence(row.name, s))
        elif _all_reduces(f.profile) and int(f.world_size) >= 2:
            out.append(NONE.format(name=row.name))
    return out
