"""What share of the checked link a profiled run's all-reduces, all-gathers and reduce-scatters
reached.

A profiled DDP run's ``collectives`` (its breakdown.json, ``training.collectives``) give per rank
the all-reduce's bus bandwidth and bytes per call, an fsdp run's its all-gathers' and
reduce-scatters'; the latest link check (``lab linkcheck``,
``lab.engine.linkcheck.latest``) of the same backend and world size, saved beside the run (its
runs folder's ``linkchecks/``), gives the bus bandwidth the link reached at each message size.
Only a check of the same GPUs, on one node (a check runs on one), with the same NCCL variables
(logging aside; summary.json's ``nccl_env``) is compared; where there is none, ``lines`` says so.
Where breakdown.json has ``collectives_min`` (each call's shortest duration over the ranks), its
row is used, else the ranks' rows. ``share`` sets the run's mean busbw over those rows against
the check's at the size nearest (in log scale) the run's mean bytes per call, kind by kind
(``OPS``: the check's all-reduce sweep, or the all-gathers and reduce-scatters it timed at a
model's fsdp unit sizes, ``lab linkcheck --model``); ``lines`` says it per run and kind for the
Compare page, and that a check without those sizes has nothing to set an fsdp run against.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from lab.engine import linkcheck

WHY = (
    "A run's collectives are fewer, interleaved with compute and bucketed, so a share well below "
    "100% is usual; near 100% means the link, not the model, sets the pace of communication."
)
OPS = linkcheck.OPS  # the kinds a link check times
WORDS = {"all_reduce": "all-reduce", "all_gather": "all-gather", "reduce_scatter": "reduce-scatter"}


def _backend(summary: Mapping[str, Any] | None, devices: list[str]) -> str:
    b = (summary or {}).get("backend")
    if b:
        return str(b)
    return "nccl" if any("cuda" in d for d in devices) else "gloo"


def _rows(profile: Mapping[str, Any] | None, op: str = "all_reduce") -> list[Mapping[str, Any]]:
    p = profile or {}
    return [
        r
        for r in p.get("collectives_min") or p.get("collectives") or []
        if r.get("op") == op and (r.get("calls") or 0) > 0 and r.get("busbw_gbps")
    ]


def share(
    profile: Mapping[str, Any] | None,
    backend: str,
    world_size: int,
    root: Path | str,
    gpus: list[int] | None = None,
    nnodes: int = 1,
    nccl_env: dict | None = None,
    op: str = "all_reduce",
) -> dict[str, Any] | None:
    """``{"busbw_gbps", "message_bytes", "check_id", "check_bytes", "check_busbw_gbps",
    "share"}``, or None without calls of ``op`` (``OPS``) in ``profile`` or a matching check
    under ``root`` that timed ``op``: one node (a check runs on one), the same ``gpus`` and NCCL
    variables where given."""
    rows = _rows(profile, op)
    if not rows or world_size < 2 or nnodes > 1:
        return None
    check = linkcheck.latest(root, backend, world_size, gpus, nccl_env)
    results = [r for r in linkcheck.rows_of(check, op) if r.get("busbw_gbps")]
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
NONE_SHARDED = (
    "{name}: no link check of the same GPUs, one node and the same NCCL variables that timed "
    "{words} to compare them with (lab linkcheck --model {model} on those GPUs, with the run's "
    "NCCL variables)"
)


def _mib(n: float) -> str:
    return f"{n / 1024**2:.2f} MiB" if n >= 1024**2 else f"{n / 1024:.0f} KiB"


def sentence(name: str, s: Mapping[str, Any], op: str = "all_reduce") -> str:
    """``share``'s figures of the kind ``op`` in a line."""
    return (
        f"{name}: {WORDS.get(op, op)} at "
        f"{s['busbw_gbps']:.3g} GB/s bus bandwidth "
        f"({_mib(s['message_bytes'])} a call), {s['share']:.0%} of the "
        f"{s['check_busbw_gbps']:.3g} GB/s the link check {s['check_id']} reached at "
        f"{_mib(s['check_bytes'])}"
    )


def _missing(name: str, run: Any, ops: list[str]) -> str:
    """The line for a run with no check to set ``ops`` against."""
    if ops == ["all_reduce"]:
        return NONE.format(name=name)
    named = [f"{WORDS[op]}s" for op in ops]
    words = ", ".join(named[:-1]) + f" and {named[-1]}" if len(named) > 1 else named[0]
    model = getattr(run, "option", lambda k: None)("model") or "MODEL"
    return NONE_SHARDED.format(name=name, words=words, model=model)


def lines(c: Any) -> list[str]:
    """One sentence per profiled run of the ``Comparison`` ``c`` and kind of collective it made
    with a link check to compare (all-reduce, all-gather, reduce-scatter); one line per run for
    the kinds without."""
    out = []
    for row in c.rows:
        f = row.figures
        if not f.profile or not f.world_size:
            continue
        run = row.run
        option = getattr(run, "option", lambda k: None)
        gpus = option("gpus")
        missing = []
        for op in OPS:
            s = share(
                f.profile,
                _backend(run.summary, f.devices),
                int(f.world_size),
                Path(run.run_dir).parent,
                list(gpus) if isinstance(gpus, (list, tuple)) else None,
                int(option("nnodes") or 1),
                (run.summary or {}).get("nccl_env"),
                op,
            )
            if s is not None:
                out.append(sentence(row.name, s, op))
            elif _rows(f.profile, op) and int(f.world_size) >= 2:
                missing.append(op)
        if missing:
            out.append(_missing(row.name, run, missing))
    return out
