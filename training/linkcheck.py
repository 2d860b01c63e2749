"""The link check's worker: an all-reduce sweep over message sizes, one process per rank under
``torchrun`` (``python -m torch.distributed.run ... -m training.linkcheck --out FILE``).

NCCL on GPUs (each rank on ``cuda:LOCAL_RANK``), gloo on the CPU. Timed as nccl-tests times:
per size, a float32 tensor of that many bytes, ``--warmup`` all-reduces (warm-ups per size), a
barrier, then ``--iters`` all-reduces back to back, timed once (CUDA events on GPUs, the clock
after a synchronise on the CPU) and divided by the iterations: a rank's time. The size's
``time_ms`` is the average over the ranks (nccl-tests' figure, which the bandwidths use) and
``max_time_ms`` the slowest rank's. Bandwidths as nccl-tests define them, in GB/s (1e9 bytes a
second): ``algbw = bytes / time`` and ``busbw = algbw × 2(n−1)/n``. Rank 0 writes
``{"backend", "world_size", "timing", "results": [{"bytes", "time_ms", "max_time_ms",
"algbw_gbps", "busbw_gbps"}]}`` to ``--out``. With ``--model NAME`` it also times what an fsdp
run of that model moves (``training.sharding.units``, then the root): one all-gather
(``all_gather_into_tensor``) and one reduce-scatter (``reduce_scatter_tensor``) per distinct unit
size, the size being the unit's float32 parameters as FSDP2 shards them (each parameter's first
dimension padded up to a multiple of the ranks), built for ``--channels`` and ``--classes``; the
same timing, nccl-tests' bytes (the gathered output, the reduced input) and ``busbw = algbw ×
(n−1)/n``: ``"model"``, ``"units": [{"name", "bytes"}]``, ``"all_gather"`` and
``"reduce_scatter"`` (rows as ``results``'). Knows nothing of the lab: it can be run by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

KIB = 1024
TIMING = "nccl-tests: barrier, iterations back to back timed once; time_ms = mean over ranks"


def sizes(max_bytes: int, min_bytes: int = KIB, factor: int = 2) -> list[int]:
    """Message sizes from ``min_bytes`` up to ``max_bytes``, each ``factor`` times the last."""
    out, n = [], min_bytes
    while n <= max_bytes:
        out.append(n)
        n *= factor
    return out


def bus_factor(n: int, op: str = "all_reduce") -> float:
    """nccl-tests' bus bandwidth factor of ``op`` over ``n`` ranks: ``2(n−1)/n`` for an
    all-reduce, ``(n−1)/n`` for an all-gather or a reduce-scatter."""
    if n <= 1:
        return 1.0
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def unit_sizes(model: torch.nn.Module, world_size: int) -> list[tuple[str, int]]:
    """``(name, bytes)`` of each unit an fsdp run shards the model into (its blocks, then the root
    with what they leave; a unit without parameters dropped): float32 parameters, each one's
    first dimension padded up to a multiple of ``world_size`` as FSDP2's even sharding pads it."""
    from training.sharding import units

    def padded(p: torch.Tensor) -> int:
        if p.dim() == 0:
            return world_size  # a scalar parameter: one element per rank
        rows = -(-p.shape[0] // world_size) * world_size
        return rows * (p.numel() // max(1, p.shape[0]))

    names = {id(m): name for name, m in model.named_modules()}
    blocks = units(model)
    inside = {id(p) for b in blocks for p in b.parameters()}
    out = [(names.get(id(b), "?"), sum(padded(p) for p in b.parameters()) * 4) for b in blocks]
    root = sum(padded(p) for p in model.parameters() if id(p) not in inside) * 4
    return [(n, b) for n, b in [*out, ("(root)", root)] if b > 0]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_iters(
    op: Callable[[], Any],
    iters: int,
    device: torch.device,
    barrier: Callable[[], Any] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Seconds per call of ``op``: a barrier, then ``iters`` calls back to back, timed once (CUDA
    events on a GPU, ``clock`` around a synchronise elsewhere)."""
    (barrier or dist.barrier)()
    if device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            op()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0 / iters
    t0 = clock()
    for _ in range(iters):
        op()
    _sync(device)
    return (clock() - t0) / iters


def over_ranks(seconds: float, device: torch.device) -> tuple[float, float]:
    """(the average, the maximum) of every rank's ``seconds``."""
    t = torch.tensor([seconds, seconds], dtype=torch.float64, device=device)
    total, slowest = t[0:1].clone(), t[1:2].clone()
    dist.all_reduce(total)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return float(total.item()) / dist.get_world_size(), float(slowest.item())


def time_one(nbytes: int, device: torch.device, warmup: int, iters: int) -> tuple[float, float]:
    """(average, maximum) over the ranks of the seconds an all-reduce of ``nbytes`` takes."""
    x = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)
    for _ in range(warmup):
        dist.all_reduce(x)
    _sync(device)
    return over_ranks(time_iters(lambda: dist.all_reduce(x), iters, device), device)


def time_sharded(
    op: str, nbytes: int, device: torch.device, warmup: int, iters: int
) -> tuple[float, float]:
    """(average, maximum) over the ranks of the seconds an all-gather into (``op`` =
    ``all_gather``), or a reduce-scatter of (``reduce_scatter``), ``nbytes`` of float32 takes."""
    n = dist.get_world_size()
    shard = max(1, nbytes // 4 // n)
    whole = torch.ones(shard * n, dtype=torch.float32, device=device)
    part = torch.ones(shard, dtype=torch.float32, device=device)
    call = (
        partial(dist.all_gather_into_tensor, whole, part)
        if op == "all_gather"
        else partial(dist.reduce_scatter_tensor, part, whole)
    )
    for _ in range(warmup):
        call()
    _sync(device)
    return over_ranks(time_iters(call, iters, device), device)


def row(
    nbytes: int,
    seconds: float,
    world_size: int,
    max_seconds: float | None = None,
    op: str = "all_reduce",
) -> dict:
    algbw = nbytes / seconds / 1e9 if seconds > 0 else 0.0
    return {
        "bytes": nbytes,
        "time_ms": round(seconds * 1000, 4),
        "max_time_ms": round((seconds if max_seconds is None else max_seconds) * 1000, 4),
        "algbw_gbps": round(algbw, 6),
        "busbw_gbps": round(algbw * bus_factor(world_size, op), 6),
    }


def sharded_rows(
    model_name: str, channels: int, classes: int, device: torch.device, warmup: int, iters: int
) -> dict[str, Any]:
    """``{"model", "units", "all_gather", "reduce_scatter"}``: the model's units and, per distinct
    unit size (smallest first), the timed all-gather and reduce-scatter rows."""
    from training import models

    n = dist.get_world_size()
    found = unit_sizes(models.build(model_name, channels, classes), n)
    out: dict[str, Any] = {
        "model": model_name,
        "units": [{"name": name, "bytes": b} for name, b in found],
    }
    for op in ("all_gather", "reduce_scatter"):
        out[op] = []
        for b in sorted({b for _, b in found}):  # padded: whole shards of every rank
            mean_s, max_s = time_sharded(op, b, device, warmup, iters)
            out[op].append(row(b, mean_s, n, max_s, op))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.linkcheck")
    ap.add_argument("--out", required=True, help="the JSON file rank 0 writes")
    ap.add_argument("--max-bytes", type=int, default=16 << 20)
    ap.add_argument("--factor", type=int, default=2, help="each size is this many times the last")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--model", help="also time the all-gathers and reduce-scatters of its units")
    ap.add_argument("--channels", type=int, default=3, help="--model's input channels")
    ap.add_argument("--classes", type=int, default=10, help="--model's classes")
    a = ap.parse_args(argv)
    cuda = torch.cuda.is_available() and torch.cuda.device_count() > 0
    backend = "nccl" if cuda else "gloo"
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)  # before init_process_group
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend)
    try:
        n, rank = dist.get_world_size(), dist.get_rank()
        results = []
        for b in sizes(a.max_bytes, factor=a.factor):
            mean_s, max_s = time_one(b, device, a.warmup, a.iters)
            results.append(row(b, mean_s, n, max_s))
        sharded = (
            sharded_rows(a.model, a.channels, a.classes, device, a.warmup, a.iters)
            if a.model
            else {}
        )
        if rank == 0:
            out = {
                "backend": backend,
                "world_size": n,
                "timing": TIMING,
                "results": results,
                **sharded,
            }
            tmp = Path(a.out).with_suffix(".tmp")
            tmp.write_text(json.dumps(out, indent=1))
            tmp.replace(a.out)
        dist.barrier()  # gloo: every rank reaches the end before any tears down
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
