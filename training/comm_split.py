"""FSDP's communication split by what it is for: the all-gathers of the forward, those of the
backward and the reduce-scatters, each waited for (exposed) or hidden, milliseconds per step
(six keys of ``phases_ms`` in ``profile/breakdown.json``).

The method, on one rank's trace (``training.breakdown`` hands over the calls and intervals):
- **the calls**: on CUDA every NCCL kernel, its kind from its name
  (``ncclDevKernel_AllGather_…``, ``ncclDevKernel_ReduceScatter_…``), on its own device; on the
  CPU every backend range (``gloo:<op>``) with the ``c10d::*`` op that issued it
  (``training.collectives.backend_calls``): the op names the kind, since gloo runs a
  reduce-scatter as an all-reduce of the whole input.
- **forward or backward**: an all-gather belongs to the loop's ``forward`` or ``backward`` range
  its call was issued in (on CUDA the kernel's start: the loop synchronises at the end of each
  phase inside the window, so a phase's kernels start and end inside its range); one issued in
  neither (the trainer's own gathers between steps) is in none of the keys. A reduce-scatter
  counts wherever it was issued.
- **time counted once**: calls are taken in issue order, each keeping the part of its spans no
  earlier call covers, so where two collectives overlap (an all-gather prefetched while a
  reduce-scatter runs) the shared time goes to the one issued first; the six keys add up to at
  most ``comm_total``, the rest being other collectives (a logging step's reductions).
- **exposed**: the kind's time minus the work that could hide it, as ``comm_exposed`` measures
  it: on CUDA the device's other kernels, on the CPU the main thread's own ops (so on the CPU it
  is an upper bound: idle Python counts as waiting); **hidden** = the kind's time − exposed.
Everything is clipped to the profiled steps, divided by their number and, on CUDA, averaged over
the process's devices.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from training import collectives
from training.intervals import Intervals, intersect, length, subtract, union

# key prefix: (kind, the loop's phase it was issued in; None = any)
SPLIT = {
    "comm_all_gather_fwd": ("all_gather", "forward"),
    "comm_all_gather_bwd": ("all_gather", "backward"),
    "comm_reduce_scatter": ("reduce_scatter", None),
}
KEYS = tuple(f"{prefix}_{part}" for prefix in SPLIT for part in ("exposed", "hidden"))


def kernel_calls(kernels: Iterable[dict[str, Any]]) -> list[collectives.Call]:
    """The NCCL kernels of a CUDA trace as calls, with their device (``args.device``, else the
    trace's ``pid`` lane)."""
    out = []
    for e in kernels:
        kind = collectives.kernel_kind(str(e["name"]))
        if kind:
            start, dur = float(e["ts"]), float(e["dur"])
            device = (e.get("args") or {}).get("device", e.get("pid"))
            out.append(collectives.Call(kind, start, ((start, start + dur),), device=device))
    return sorted(out, key=lambda c: c.ts)


def _inside(ts: float, spans: Intervals) -> bool:
    return any(start <= ts < end for start, end in spans)


def key_of(call: collectives.Call, phases: Mapping[str, Intervals]) -> str | None:
    """The key a call counts under, or None (another kind, or an all-gather outside forward and
    backward)."""
    for prefix, (kind, phase) in SPLIT.items():
        if call.kind == kind and (phase is None or _inside(call.ts, phases.get(phase, []))):
            return prefix
    return None


def _own_spans(calls: list[collectives.Call]) -> list[tuple[collectives.Call, Intervals]]:
    """Each call with the part of its spans that no call issued before it covers."""
    covered: Intervals = []
    out = []
    for call in sorted(calls, key=lambda c: c.ts):
        own = subtract(union(call.spans), covered)
        covered = union([*covered, *own])
        out.append((call, own))
    return out


def split(
    calls: list[collectives.Call],
    phases: Mapping[str, Intervals],
    working: Mapping[Any, Intervals],
    window: Intervals,
    n_steps: int,
) -> dict[str, float]:
    """The six ``KEYS`` in ms per step: ``calls`` (``device`` None on the CPU), the loop's
    ``forward``/``backward`` ranges, per device the work that hides communication (``working``,
    each a ``union``; its devices are the ones averaged over), the profiled steps' ``window``."""
    totals = dict.fromkeys(KEYS, 0.0)
    devices = list(working) or [None]
    for device in devices:
        mine: dict[str, Intervals] = {prefix: [] for prefix in SPLIT}
        for call, own in _own_spans([c for c in calls if c.device == device]):
            prefix = key_of(call, phases)
            if prefix:
                mine[prefix].extend(own)
        for prefix, spans in mine.items():
            time = intersect(union(spans), window)
            exposed = length(subtract(time, working.get(device, [])))
            totals[f"{prefix}_exposed"] += exposed
            totals[f"{prefix}_hidden"] += length(time) - exposed
    return {k: v / len(devices) / n_steps / 1000.0 for k, v in totals.items()}
