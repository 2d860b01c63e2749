"""The pre-flight check: what a run will do on this machine, in plain words, before it starts.

``preflight(config, snapshot)`` names the devices (and how CUDA_VISIBLE_DEVICES,
given their UUIDs, renumbers them), the batch each device or process gets, the
backend, and the traps of DESIGN.md that apply (DP's heavier first GPU, DDP on
the CPU, a free port per job, the rendezvous of several nodes, GPUs already
busy, AMP), and what the lab cannot see of the chosen GPUs (a process list it
may not read, MIG mode). It asks no device itself: the config and a device
snapshot are its arguments.
Tested by tests/test_engine_config.py.
"""
from __future__ import annotations

import os

from lab.engine.config import RunConfig
from lab.engine.device_notes import holders, limits
from lab.engine.devices import DeviceSnapshot
from lab.engine.environment import omp_threads


def preflight(config: RunConfig, snapshot: DeviceSnapshot) -> list[str]:
    """Plain-words lines: devices, per-device batch, backend, and the traps that apply."""
    c = config
    gpus = list(c.gpus)
    out: list[str] = []
    if gpus:
        names = {g.index: g.name for g in getattr(snapshot, "gpus", ())}
        out.append("Devices: " + ", ".join(f"GPU {g} ({names.get(g, 'unknown')})" for g in gpus) + ".")
        seen = ", ".join(f"cuda:{i}" for i in range(len(gpus)))
        if gpus != list(range(len(gpus))):
            out.append(f"CUDA_VISIBLE_DEVICES names GPU {', '.join(map(str, gpus))} by UUID and renumbers them: the "
                       f"trainer sees {seen}; the dashboard keeps NVML's numbers.")
    else:
        cores = getattr(getattr(snapshot, "cpu", None), "cores", None) or os.cpu_count() or 1
        out.append(f"Devices: the CPU ({cores} cores), no GPU.")
    b = c.batch_size
    if c.mode == "single":
        out.append(f"One process on one device; batch {b} per step.")
    elif c.mode == "dp":
        if len(gpus) < 2:
            out.append(f"DataParallel needs at least two GPUs; with {len(gpus)} it falls back to one device "
                       f"(recorded as effective mode single), batch {b} per step.")
        else:
            out.append(f"DataParallel in one process: each step scatters the batch of {b} over {len(gpus)} GPUs "
                       f"({b // len(gpus)} each), replicates the model and gathers the outputs on GPU {gpus[0]}.")
            out.append(f"GPU {gpus[0]} (the first) holds more memory than the others: it keeps the master copy "
                       "and gathers every output.")
    else:
        world = c.nproc * c.nnodes
        backend = "nccl" if gpus else "gloo"
        where = "one per GPU" if gpus else "on the CPU"
        out.append(f"DDP: {world} processes ({c.nproc} per node x {c.nnodes} node{'s' if c.nnodes > 1 else ''}, "
                   f"{where}) started by torchrun; {b // max(1, world)} samples per process per step; backend {backend}.")
        if not gpus:
            cores = os.cpu_count() or 1
            out.append(f"DDP on the CPU uses gloo: {c.nproc} processes share {cores} cores "
                       f"(OMP_NUM_THREADS={omp_threads(c, cores)} each), so expect little or no speedup.")
        if c.nnodes > 1:
            out.append(f"Rendezvous: c10d at {c.rdzv_endpoint}; start the command shown for each other node "
                       "with the same options; the job waits until all nodes have joined.")
        else:
            out.append("A free port is chosen for this job when it starts (not the default 29500), "
                       "so jobs on one machine never collide.")
    if gpus:
        out += [f"Busy: {h}." for h in holders(snapshot, tuple(gpus))]
        out += [f"Cannot see: {line}." for line in limits(snapshot, tuple(gpus))]
    if c.amp:
        out.append("AMP: fp16 autocast with a GradScaler on CUDA" if gpus else "AMP on the CPU: bf16 autocast")
    return out
