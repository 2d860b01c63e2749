"""Where a profiled step's time went: from one rank's Chrome trace to the figures of
``profile/breakdown.json``.

Owns the method (docs/contracts.md section 2, "profile/"), on plain lists of
``(start, end)`` intervals in microseconds, so that overlaps are counted once
(``training.intervals``).
The step is the ``ProfilerStep#k`` range on the loop's thread (its thread is
the main thread); ``data``, ``forward``, ``backward`` and ``optimizer`` are the
loop's ranges of those names on it; ``other`` is what of the step they leave
(not negative). Communication is every collective the trace shows: on CUDA
the NCCL kernels, and ``comm_exposed`` is their time when no other kernel
runs on the same device, computed per device (DataParallel's process drives several) and then
averaged over them (``comm_by_device_ms`` keeps each); on the CPU the ``gloo:*``/``nccl:*``
ranges of the backend's threads and the ``c10d::*`` ops on the main thread, and
``comm_exposed`` is their time when the main thread runs no op of its own (it waits, e.g.
for DDP's all-reduce at the end of backward; a ``c10d::*`` op and FSDP2's range around its
collective, ``FSDP::all_gather (…)``/``FSDP::post_backward_reduce (…)``, are waiting even inside
a busy parent). An fsdp run's communication is also split into its all-gathers in forward and
in backward and its reduce-scatters, exposed and hidden (``training.comm_split``, which states
that method). DataParallel's phases are its ``Scatter``,
``Broadcast`` (replicate) and ``Gather`` ops on the main thread. Everything is
clipped to the steps and divided by their number: milliseconds per step.
"""

from __future__ import annotations

from typing import Any, Iterable

from training import collectives, comm_split
from training.intervals import Intervals, intersect, length, subtract, union

STEP_PREFIX = "ProfilerStep#"
PHASES = ("data", "forward", "backward", "optimizer")
KEYS = (
    *PHASES,
    "comm_total",
    "comm_exposed",
    "dp_scatter",
    "dp_replicate",
    "dp_gather",
    "other",
    *comm_split.KEYS,  # FSDP's all-gathers (forward, backward) and reduce-scatters
)
DP_OPS = {"dp_scatter": "Scatter", "dp_replicate": "Broadcast", "dp_gather": "Gather"}
COMM_PREFIXES = ("gloo:", "nccl:", "c10d::", "record_param_comms")
FSDP_WAITS = ("FSDP::all_gather", "FSDP::post_backward_reduce")


def is_comm(name: str) -> bool:
    return name.startswith(COMM_PREFIXES)


def is_wait(name: str) -> bool:
    """FSDP2's range around one of its collectives (``FSDP::all_gather (head)``), which on the CPU
    lasts until the collective is done."""
    return name in FSDP_WAITS or name.startswith(tuple(f"{w} (" for w in FSDP_WAITS))


def _span(e: dict[str, Any]) -> tuple[float, float]:
    return float(e["ts"]), float(e["ts"]) + float(e["dur"])


def _device(e: dict[str, Any]) -> Any:
    """A kernel's device: the trace's ``args.device``, else its ``pid`` (the profiler's device
    lane)."""
    return (e.get("args") or {}).get("device", e.get("pid"))


def _comm(
    events: list[dict[str, Any]], main_ops: list[dict[str, Any]]
) -> dict[Any, tuple[Intervals, Intervals]]:
    """Per device: (all communication, the work that hides it), before clipping to the steps;
    what of the first the second leaves is what the step waited for. On CUDA each device's NCCL
    kernels against that device's other kernels (another GPU's compute does not hide them:
    DataParallel's one process drives several); on the CPU one entry, ``None``."""
    kernels = [e for e in events if e.get("cat") == "kernel"]
    if kernels:  # CUDA: each device's timeline says what overlapped
        out = {}
        for dev in sorted({_device(e) for e in kernels}, key=str):
            mine = [e for e in kernels if _device(e) == dev]
            comm = union(_span(e) for e in mine if "nccl" in e["name"].lower())
            compute = union(_span(e) for e in mine if "nccl" not in e["name"].lower())
            out[dev] = (comm, compute)
        return out
    comm = union(
        _span(e)
        for e in events
        if e.get("cat") in ("cpu_op", "user_annotation") and is_comm(e["name"])
    )
    # A comm op nested in a busy parent (DDP launches its all-reduce inside AccumulateGrad) is
    # waiting, not work; so is FSDP's range around its collective, which it waits for inside
    # (its backward all-gather runs in a hook inside an autograd op)
    waiting = union(_span(e) for e in main_ops if is_comm(e["name"]) or is_wait(e["name"]))
    working = subtract(union(_span(e) for e in main_ops if not is_comm(e["name"])), waiting)
    return {None: (comm, working)}


def _split(
    events: list[dict[str, Any]],
    on_main: list[dict[str, Any]],
    working: dict[Any, Intervals],
    window: Intervals,
    n_steps: int,
    world_size: int,
) -> dict[str, float]:
    """FSDP's all-gathers (forward, backward) and reduce-scatters, exposed and hidden
    (``training.comm_split``)."""
    kernels = [e for e in events if e.get("cat") == "kernel"]
    calls = (
        comm_split.kernel_calls(kernels)
        if kernels
        else collectives.backend_calls(events, world_size)
    )
    phases = {
        name: union(
            _span(e) for e in on_main if e.get("cat") == "user_annotation" and e["name"] == name
        )
        for name in ("forward", "backward")
    }
    return comm_split.split(calls, phases, working, window, n_steps)


def rank_figures(trace: dict[str, Any], rank: int, world_size: int = 1) -> dict[str, Any] | None:
    """``{"rank", "step_ms", "phases_ms", "collectives"}`` of one rank's trace; ``None`` when it
    holds no profiled step."""
    events = [
        e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e and "name" in e
    ]
    steps = [
        e
        for e in events
        if e.get("cat") == "user_annotation" and str(e["name"]).startswith(STEP_PREFIX)
    ]
    if not steps:
        return None
    main = (steps[0].get("pid"), steps[0].get("tid"))
    on_main = [e for e in events if (e.get("pid"), e.get("tid")) == main]
    window, n = union(_span(e) for e in steps), len(steps)

    def per_step(spans: Iterable[tuple[float, float]]) -> float:
        return length(intersect(union(spans), window)) / n / 1000.0

    phases = {
        name: per_step(
            _span(e) for e in on_main if e.get("cat") == "user_annotation" and e["name"] == name
        )
        for name in PHASES
    }
    main_ops = [e for e in on_main if e.get("cat") == "cpu_op"]
    comm = _comm(events, main_ops + [e for e in on_main if is_wait(str(e["name"]))])
    by_device = {d: (per_step(c), per_step(subtract(c, w))) for d, (c, w) in comm.items()}
    # combined: the mean over the process's devices of each device's own figures
    phases["comm_total"] = sum(c for c, _ in by_device.values()) / len(by_device)
    phases["comm_exposed"] = sum(x for _, x in by_device.values()) / len(by_device)
    for key, op in DP_OPS.items():
        phases[key] = per_step(_span(e) for e in main_ops if e["name"] == op)
    working = {d: w for d, (_, w) in comm.items()}
    phases.update(_split(events, on_main, working, window, n, world_size))
    step_ms = length(window) / n / 1000.0
    phases["other"] = max(0.0, step_ms - sum(phases[p] for p in PHASES))
    return {
        "rank": rank,
        "step_ms": round(step_ms, 4),
        "phases_ms": {k: round(phases[k], 4) for k in KEYS},
        "comm_by_device_ms": {
            str(d): {"comm_total": round(c, 4), "comm_exposed": round(x, 4)}
            for d, (c, x) in by_device.items()
            if d is not None
        },
        "collectives": collectives.rank_collectives(events, window, n, rank, world_size),
        "calls": {"steps": n, "ops": collectives.rank_calls(events, window, world_size)},
    }


def combine(
    window: tuple[int, int],
    ranks: list[dict[str, Any]],
    device: str,
    effective_mode: str,
    world_size: int,
    note: str | None,
) -> dict[str, Any]:
    """breakdown.json: the mean over ranks of each figure, and every rank's own; ``collectives``
    lists every rank's rows, ``collectives_min`` each call's shortest duration over the ranks
    (``collectives.min_over_ranks``)."""
    ranks = sorted(ranks, key=lambda r: r["rank"])
    comms = [row for r in ranks for row in r.get("collectives", [])]
    calls = [r["calls"] for r in ranks if r.get("calls")]
    fastest = collectives.min_over_ranks(
        [c["ops"] for c in calls], calls[0]["steps"] if calls else 1, world_size
    )
    ranks = [{k: v for k, v in r.items() if k not in ("collectives", "calls")} for r in ranks]

    def mean(values: Iterable[float]) -> float:
        values = list(values)
        return round(sum(values) / len(values), 4)

    return {
        "steps": list(window),
        "step_ms": mean(r["step_ms"] for r in ranks),
        "phases_ms": {k: mean(r["phases_ms"][k] for r in ranks) for k in KEYS},
        "per_rank": ranks,
        "collectives": comms,
        "collectives_min": fastest,
        "device": device,
        "effective_mode": effective_mode,
        "world_size": world_size,
        "traces": [f"profile/trace_rank{r['rank']}.json.gz" for r in ranks],
        "note": note,
    }
