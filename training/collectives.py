"""What a profiled window's collectives moved: ``collectives`` of ``profile/breakdown.json``.

Per rank and per kind (``all_reduce``, ``broadcast``, ``all_gather``, ``reduce_scatter``, …):
calls, bytes and total time per profiled step, and the bandwidths of nccl-tests
(``algbw = bytes / time``; ``busbw = algbw × factor``, the factor being ``2(n−1)/n`` for
all_reduce, ``(n−1)/n`` for all_gather, reduce_scatter and all_to_all, 1 otherwise), in GB/s
(1e9 bytes a second). On the CPU every call is a ``gloo:<op>`` range of the backend's thread,
whose recorded input shapes (the profiler runs with ``record_shapes``) give the bytes and whose
issuing ``c10d::*`` op its kind (``backend_calls``: gloo runs FSDP2's reduce-scatter as an
all-reduce of the whole input, which counts as ``reduce_scatter``); on CUDA the
bytes come from ``record_param_comms`` (``Collective name``, ``In msg nelems``, ``dtype``;
all_gather counts its gathered output, ``Out msg nelems``, as nccl-tests do) and the time from
the NCCL kernels of that kind; DataParallel's own collectives, which have no ``record_param_comms``,
get their bytes from the input shapes of its ops (``Broadcast``: the
parameters it copies to the replicas; ``ReduceAddCoalesced``: one replica's gradients, its inputs
over the devices), each op's bytes on the first kernel of its kind after it. Only calls that start
inside a profiled step count.

``min_over_ranks`` pairs the calls of every rank by their sequence number (the k-th call of a kind
on each rank is the same collective: every rank issues them in the same order) and takes each
call's shortest duration over the ranks: a rank that arrived early waited for the others, so the
shortest is the closest to the transfer itself (breakdown.json's ``collectives_min``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "double": 8,
    "float64": 8,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "c10::half": 2,
    "c10::bfloat16": 2,
    "long": 8,
    "long int": 8,
    "int64": 8,
    "int": 4,
    "int32": 4,
    "unsigned char": 1,
    "uint8": 1,
    "bool": 1,
    "signed char": 1,
    "int8": 1,
}
DP_OPS = {"Broadcast": "broadcast", "ReduceAddCoalesced": "reduce"}  # DataParallel's autograd ops
KEYS = ("op", "rank", "calls", "bytes", "total_ms", "algbw_gbps", "busbw_gbps")
# NCCL kernel names (ncclDevKernel_AllReduce_Sum_f32_RING_LL) to our kinds
KERNEL_KINDS = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "broadcast": "broadcast",
    "sendrecv": "send_recv",
    "alltoall": "all_to_all",
    "reduce": "reduce",
}


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' bus bandwidth factor of ``op`` over ``n`` ranks."""
    if n <= 1:
        return 1.0
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all", "alltoall"):
        return (n - 1) / n
    return 1.0


def _first_tensor_bytes(args: dict[str, Any]) -> int:
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    for d, t in zip(dims, types):
        while isinstance(d, list) and d and isinstance(d[0], list):
            d = d[0]  # a TensorList: its first tensor
        if isinstance(d, list) and d and str(t).lower() in DTYPE_BYTES:
            return math.prod(int(x) for x in d) * DTYPE_BYTES[str(t).lower()]
    return 0


def _tensor_bytes(args: dict[str, Any], limit: int | None = None) -> int:
    """The bytes of an op's tensor inputs (the first ``limit`` of them)."""
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    sizes = [
        math.prod(int(x) for x in d) * DTYPE_BYTES.get(str(t).lower(), 0)
        for d, t in zip(dims, types)
        if isinstance(d, list) and d and not isinstance(d[0], list)
    ]
    return sum(sizes[:limit] if limit is not None else sizes)


def _dp_sizes(events: list[dict[str, Any]], world_size: int) -> dict[str, list[tuple[float, int]]]:
    """DataParallel's ops as ``{kind: [(ts, bytes), ...]}`` from their input shapes:
    ``ReduceAddCoalesced(destination, num_inputs, *grads)`` reduces its first ``num_inputs``
    tensors' worth (its recorded concrete input; else its inputs over ``world_size``)."""
    out: dict[str, list[tuple[float, int]]] = {}
    for e in sorted(events, key=lambda e: float(e["ts"])):
        kind = DP_OPS.get(str(e["name"])) if e.get("cat") == "cpu_op" else None
        if not kind:
            continue
        args = e.get("args") or {}
        if kind == "reduce":
            concrete = args.get("Concrete Inputs") or []
            try:
                nbytes = _tensor_bytes(args, int(concrete[1]))
            except (IndexError, TypeError, ValueError):
                nbytes = _tensor_bytes(args) // max(1, world_size)
        else:
            nbytes = _tensor_bytes(args)
        out.setdefault(kind, []).append((float(e["ts"]), nbytes))
    return out


def _in_window(ts: float, window: list[tuple[float, float]]) -> bool:
    return any(start <= ts < end for start, end in window)


def _comms_kind(name: str) -> str:
    """record_param_comms' ``Collective name`` as our kind: ``allgather``, ``_allgather_base``
    and ``all_gather_into_tensor_coalesced`` are ``all_gather``; ``allreduce`` ``all_reduce``."""
    low = name.lower().replace("_", "")
    return next((kind for key, kind in KERNEL_KINDS.items() if key in low), name)


def kernel_kind(name: str) -> str | None:
    """An NCCL kernel's kind (``ncclDevKernel_ReduceScatter_Sum_f32_RING_LL``: ``reduce_scatter``);
    None for any other kernel."""
    low = name.lower().replace("_", "")
    if "nccl" not in low:
        return None
    return next((kind for key, kind in KERNEL_KINDS.items() if key in low), None)


def _calls(events: list[dict[str, Any]], world_size: int) -> list[tuple[str, int, float]]:
    """``(op, bytes, dur_us)`` of every collective call in ``events``."""
    kernels = [e for e in events if e.get("cat") == "kernel" and kernel_kind(str(e["name"]))]
    if kernels:  # CUDA: time from the kernels, bytes from record_param_comms in the same order
        params = [e for e in events if e["name"] == "record_param_comms"]
        sizes: dict[str, list[int]] = {}
        for e in sorted(params, key=lambda e: float(e["ts"])):
            a = e.get("args") or {}
            kind = _comms_kind(str(a.get("Collective name", "")))
            unit = DTYPE_BYTES.get(str(a.get("dtype", "")).lower().replace("torch.", ""), 4)
            nelems = int(a.get("In msg nelems", 0) or 0)
            if kind == "all_gather":  # nccl-tests count the gathered output
                nelems = int(a.get("Out msg nelems", 0) or 0) or nelems * world_size
            sizes.setdefault(kind, []).append(nelems * unit)
        dp = _dp_sizes(events, world_size)
        out = []
        for e in sorted(kernels, key=lambda e: float(e["ts"])):
            kind = kernel_kind(str(e["name"])) or "other"
            nbytes = sizes[kind].pop(0) if sizes.get(kind) else 0
            pending = dp.get(kind) or []
            if not nbytes and pending and pending[0][0] <= float(e["ts"]):
                nbytes = pending.pop(0)[1]  # the op's bytes on its first kernel
            out.append((kind, nbytes, float(e["dur"])))
        return out
    return [(c.kind, c.nbytes, c.dur) for c in backend_calls(events, world_size) if c.ranged]


@dataclass(frozen=True)
class Call:
    """One collective call: its kind, when it was issued (µs), the spans it covers (on the CPU its
    ``c10d::*`` op and its backend's range; on CUDA its kernel), the bytes nccl-tests would count,
    the backend range's duration (µs), whether that range is in the trace (``ranged``) and its
    device (a kernel's; None on the CPU)."""

    kind: str
    ts: float
    spans: tuple[tuple[float, float], ...]
    nbytes: int = 0
    dur: float = 0.0
    ranged: bool = False
    device: Any = None


def _span(e: dict[str, Any]) -> tuple[float, float]:
    return float(e["ts"]), float(e["ts"]) + float(e["dur"])


def _op_kind(e: dict[str, Any]) -> str:
    """A ``c10d::*`` op's kind: ``c10d::_reduce_scatter_base_`` is ``reduce_scatter``."""
    return _comms_kind(str(e["name"]).split("::", 1)[1])


def backend_calls(events: list[dict[str, Any]], world_size: int) -> list[Call]:
    """Every collective of a CPU trace, in issue order: each ``gloo:<op>``/``nccl:<op>`` range of
    the backend's threads paired with the ``c10d::*`` op that issued it (the oldest unpaired one
    that may have, started before it: a process group runs its work first in, first out), and the
    ops left without a range. The op names the kind: gloo runs ``_reduce_scatter_base`` as an
    all-reduce of the whole input, so its range reads ``gloo:all_reduce`` (torch 2.14)."""
    by_ts = sorted(events, key=lambda e: float(e["ts"]))
    ranges = [
        e
        for e in by_ts
        if e.get("cat") == "user_annotation" and str(e["name"]).startswith(("gloo:", "nccl:"))
    ]
    native = {str(e["name"]).split(":", 1)[1] for e in ranges}
    queues: dict[str, list[dict[str, Any]]] = {}
    for e in by_ts:
        if e.get("cat") == "cpu_op" and str(e["name"]).startswith("c10d::"):
            kind = _op_kind(e)
            runs_as = "all_reduce" if kind == "reduce_scatter" and kind not in native else kind
            queues.setdefault(runs_as, []).append(e)
    out = []
    for r in ranges:
        op = str(r["name"]).split(":", 1)[1]
        queue = queues.get(op) or []
        issuer = queue.pop(0) if queue and float(queue[0]["ts"]) <= float(r["ts"]) else None
        kind = _op_kind(issuer) if issuer else op
        nbytes = _first_tensor_bytes(r.get("args") or {})
        if kind == "all_gather":
            nbytes *= world_size  # nccl-tests count the gathered output
        spans = (_span(r), _span(issuer)) if issuer else (_span(r),)
        ts = float((issuer or r)["ts"])
        out.append(Call(kind, ts, spans, nbytes, float(r["dur"]), ranged=True))
    for left in (e for queue in queues.values() for e in queue):
        out.append(Call(_op_kind(left), float(left["ts"]), (_span(left),)))
    return sorted(out, key=lambda c: c.ts)


def rank_calls(
    events: list[dict[str, Any]], window: list[tuple[float, float]], world_size: int
) -> dict[str, list[tuple[int, float]]]:
    """``{kind: [(bytes, dur_us), ...]}``: one rank's calls inside ``window``, in issue order."""
    inside = [e for e in events if _in_window(float(e["ts"]), window)]
    out: dict[str, list[tuple[int, float]]] = {}
    for op, nbytes, dur in _calls(inside, world_size):
        out.setdefault(op, []).append((nbytes, dur))
    return out


def _rows(
    calls: dict[str, list[tuple[int, float]]], n_steps: int, rank: Any, world_size: int
) -> list[dict[str, Any]]:
    rows = []
    for op, got in sorted(calls.items()):
        nbytes, dur_us = sum(b for b, _ in got), sum(d for _, d in got)
        algbw = nbytes / (dur_us * 1e-6) / 1e9 if dur_us > 0 else 0.0
        rows.append(
            {
                "op": op,
                "rank": rank,
                "calls": round(len(got) / n_steps, 4),
                "bytes": round(nbytes / n_steps),
                "total_ms": round(dur_us / n_steps / 1000.0, 4),
                "algbw_gbps": round(algbw, 4),
                "busbw_gbps": round(algbw * bus_factor(op, world_size), 4),
            }
        )
    return rows


def rank_collectives(
    events: list[dict[str, Any]],
    window: list[tuple[float, float]],
    n_steps: int,
    rank: int,
    world_size: int,
) -> list[dict[str, Any]]:
    """One row per collective kind of one rank's trace events (complete ``X`` events), per step
    of the ``n_steps`` profiled steps whose spans are ``window`` (µs)."""
    return _rows(rank_calls(events, window, world_size), n_steps, rank, world_size)


def min_over_ranks(
    per_rank: list[dict[str, list[tuple[int, float]]]], n_steps: int, world_size: int
) -> list[dict[str, Any]]:
    """Rows as ``rank_collectives``' with ``"rank": "min"``: each call paired over the ranks by
    its sequence number and timed by its shortest duration there (only calls every rank made)."""
    if not per_rank:
        return []
    paired: dict[str, list[tuple[int, float]]] = {}
    for op in sorted(set.intersection(*(set(r) for r in per_rank))):
        n = min(len(r[op]) for r in per_rank)
        paired[op] = [
            (max(r[op][k][0] for r in per_rank), min(r[op][k][1] for r in per_rank))
            for k in range(n)
        ]
    return _rows(paired, n_steps, "min", world_size)
