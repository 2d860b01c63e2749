"""What a run will do, in plain words: the pre-flight's lines that refuse nothing.

``lines(config, snapshot)`` names the devices (and how CUDA_VISIBLE_DEVICES, given their UUIDs,
renumbers them), the batch each device or process gets, the backend, the traps of DESIGN.md that
apply (DP's heavier first GPU, DDP and FSDP on the CPU, FSDP's sharding and its collectives, a
free port per job, the rendezvous of several nodes, AMP), what the performance knobs do, and what
the lab cannot see of the chosen GPUs (a process list it may not read, MIG mode). The checks that
refuse or warn are ``lab.engine.preflight.checks``'.
"""

from __future__ import annotations

import os

from lab.engine.devices.notes import limits
from lab.engine.devices.nvml import DeviceSnapshot
from lab.engine.spec import modes, nccl
from lab.engine.spec.modes import DDP, DP, FSDP, SINGLE
from lab.engine.spec.run import RunConfig, omp_threads


def lines(config: RunConfig, snapshot: DeviceSnapshot) -> list[str]:
    """The run's devices, batch, backend and traps, then what its knobs do."""
    return _describe(config, snapshot) + _knob_lines(config)


def _knob_lines(c: RunConfig) -> list[str]:
    """What the performance knobs do to this run: precision, accumulation, the NCCL preset."""
    out: list[str] = []
    if c.precision != "fp32":
        out.append(
            f"Precision {c.precision}: autocast"
            + (" with a GradScaler." if c.precision == "fp16" else ", no scaler.")
        )
    n = c.micro_batches
    if n > 1:
        per = c.batch_size // max(1, c.world_size) if modes.torchrun(c.mode) else c.batch_size
        out.append(
            f"Gradient accumulation: {n} micro-batches of {per // n} per "
            f"process make each optimizer step of the global batch {c.batch_size}"
            + (
                "; DDP all-reduces once per step (the others run inside no_sync())."
                if c.mode == DDP
                else "; FSDP reduce-scatters once per step (set_requires_gradient_sync)."
                if c.mode == FSDP
                else "."
            )
        )
    if c.nccl_preset in nccl.PRESETS:
        env = nccl.describe(c.nccl_preset)
        if not (c.gpus or c.gpus_per_node):
            out.append(
                f"Note: NCCL preset {env} has no effect here: without GPUs the run uses gloo, "
                "which reads no NCCL variables (they are still set and recorded in run.json)."
            )
        elif c.mode == SINGLE:
            out.append(f"Note: NCCL preset {env} has no effect on one device: no collectives.")
        else:
            out.append(
                f"NCCL preset {env}: a starting point from the seeds, not a measured one: "
                "compare it with a run without it."
            )
    return out


def _describe(config: RunConfig, snapshot: DeviceSnapshot) -> list[str]:
    c = config
    gpus = list(c.gpus)
    out: list[str] = []
    if gpus:
        names = {g.index: g.name for g in getattr(snapshot, "gpus", ())}
        out.append(
            "Devices: " + ", ".join(f"GPU {g} ({names.get(g, 'unknown')})" for g in gpus) + "."
        )
        seen = ", ".join(f"cuda:{i}" for i in range(len(gpus)))
        if gpus != list(range(len(gpus))):
            out.append(
                f"CUDA_VISIBLE_DEVICES names GPU {', '.join(map(str, gpus))} by UUID and "
                "renumbers them: the "
                f"trainer sees {seen}; the dashboard keeps NVML's numbers."
            )
    else:
        cores = getattr(getattr(snapshot, "cpu", None), "cores", None) or os.cpu_count() or 1
        out.append(f"Devices: the CPU ({cores} cores), no GPU.")
    b = c.batch_size
    if c.mode == SINGLE:
        out.append(f"One process on one device; batch {b} per step.")
    elif c.mode == DP:
        if len(gpus) < 2:
            out.append(
                f"DataParallel needs at least two GPUs; with {len(gpus)} it falls back to one "
                "device "
                f"(recorded as effective mode single), batch {b} per step."
            )
        else:
            out.append(
                f"DataParallel in one process: each step scatters the batch of {b} over "
                f"{len(gpus)} GPUs "
                f"({b // len(gpus)} each), replicates the model and gathers the outputs on GPU "
                f"{gpus[0]}."
            )
            out.append(
                f"GPU {gpus[0]} (the first) holds more memory than the others: it keeps the "
                "master copy "
                "and gathers every output."
            )
    else:
        out += _torchrun_lines(c)
    if gpus:
        out += [f"Cannot see: {line}." for line in limits(snapshot, tuple(gpus))]
    if c.amp:
        out.append(
            "AMP: fp16 autocast with a GradScaler on CUDA"
            if gpus
            else "AMP on the CPU: bf16 autocast"
        )
    return out


def _torchrun_lines(c: RunConfig) -> list[str]:
    """What a ddp or fsdp run does: its processes, FSDP's sharding, gloo's cores, the rendezvous."""
    gpus, b, out = list(c.gpus), c.batch_size, []
    world = c.nproc * c.nnodes
    backend = "nccl" if gpus else "gloo"
    where = "one per GPU" if gpus else "on the CPU"
    name = c.mode.upper()
    out.append(
        f"{name}: {world} processes ({c.nproc} per node x {c.nnodes} "
        f"node{'s' if c.nnodes > 1 else ''}, "
        f"{where}) started by torchrun; {b // max(1, world)} samples per process per step; "
        f"backend {backend}."
    )
    if c.mode == FSDP:
        out.append(
            f"FSDP: each rank keeps 1/{world} of the parameters, gradients and optimizer "
            "state; each block's parameters are all-gathered before its forward"
            + (" and again before its backward" if c.reshard_after_forward == "on" else "")
            + ", its gradients reduce-scattered after its backward."
        )
    if not gpus:
        cores = os.cpu_count() or 1
        out.append(
            f"{name} on the CPU uses gloo: {c.nproc} processes share {cores} cores "
            f"(OMP_NUM_THREADS={omp_threads(c, cores)} each), so expect little or no speedup."
        )
    if c.nnodes > 1:
        out.append(
            f"Rendezvous: c10d at {c.rdzv_endpoint}; start the command shown for each other "
            "node "
            "with the same options; the job waits until all nodes have joined."
        )
    else:
        out.append(
            "A free port is chosen for this job when it starts (not the default 29500), "
            "so jobs on one machine never collide."
        )
    return out
