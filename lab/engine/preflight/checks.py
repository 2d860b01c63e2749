"""The pre-flight check: what a run will do on this machine, in plain words, before it starts.

``preflight(config, snapshot)`` names the devices (and how CUDA_VISIBLE_DEVICES,
given their UUIDs, renumbers them), the batch each device or process gets, the
backend, the traps of DESIGN.md that apply (DP's heavier first GPU, DDP on the
CPU, a free port per job, the rendezvous of several nodes, AMP), and what the
lab cannot see of the chosen GPUs (a process list it may not read, MIG mode).
It also holds the seeds' checks, each one line that says whether it refuses or warns:

- refused (``refusals``, which ``config.problems`` includes when given the
  facts, so the launch starts nothing): a driver whose CUDA major version is
  older than the one PyTorch is built for; free memory on a chosen GPU below
  the run's estimate (``lab.engine.preflight.estimate``: parameters, gradients,
  momentum and a batch of activations of the chosen model). DP asking for
  more GPUs than are visible is refused by ``config`` itself.
- warned: a driver older only in the CUDA minor version (CUDA's minor-version
  compatibility starts it); free memory within ``CONTEXT_MIB`` of the
  estimate; the runs folder's free space below what the run's checkpoints and events may take
  (``lab.engine.preflight.disk``); ``nnodes > 1`` with a loopback rendezvous host; a chosen GPU
  already busy with another process.

``machine_facts`` reads what those need (NVML through ``devices``, the
estimate, PyTorch's CUDA version), only when GPUs are chosen, so a CPU run
imports no torch (unless its runs folder has under 50 GiB free: the disk estimate counts the
model's parameters, ``lab.engine.preflight.disk``).
"""

from __future__ import annotations

import ipaddress
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from lab.engine.devices import links
from lab.engine.devices import nvml as devices
from lab.engine.devices.notes import holders, limits
from lab.engine.devices.nvml import DeviceSnapshot
from lab.engine.preflight import disk, estimate
from lab.engine.spec import nccl
from lab.engine.spec.run import ConfigError, RunConfig, omp_threads

log = logging.getLogger(__name__)
# the CUDA context and the allocator's slack come on top of the estimate: warn within this
CONTEXT_MIB = 512


@dataclass(frozen=True)
class MachineFacts:
    """What the seeds' checks need to know of this machine; empty = nothing known, nothing refused.

    ``driver_cuda``: the newest CUDA the driver supports; ``torch_cuda``: the
    CUDA PyTorch is built for; per chosen physical GPU, ``free_mib`` and the
    run's estimate there, ``need_mib``, with ``need_text`` saying of what.
    """

    driver_cuda: tuple[int, int] | None = None
    torch_cuda: tuple[int, int] | None = None
    free_mib: Mapping[int, float] = field(default_factory=dict)
    need_mib: Mapping[int, float] = field(default_factory=dict)
    need_text: Mapping[int, str] = field(default_factory=dict)
    # the runs folder's free bytes, and what the run may write there (``disk``)
    disk_folder: str = ""
    disk_free: int | None = None
    disk_need: int | None = None
    disk_text: str = ""
    # pairs of the chosen GPUs whose peer-to-peer reads NVML says are not OK: "0-3 (TNS)"
    p2p_not_ok: tuple[str, ...] = ()
    # chosen GPUs below compute capability 8.0 when the run asks for bf16: (index, (major, minor))
    bf16_slow: tuple[tuple[int, tuple[int, int]], ...] = ()


def _bf16_slow(config: RunConfig) -> tuple[tuple[int, tuple[int, int]], ...]:
    """The chosen GPUs that have no bf16 of their own (compute capability below 8.0: V100, T4),
    where ``torch.cuda.is_bf16_supported()`` still says yes and bf16 runs emulated."""
    if config.precision != "bf16":
        return ()
    caps = {g: devices.compute_capability(g) for g in config.gpus}
    return tuple((g, cc) for g, cc in caps.items() if cc is not None and cc < (8, 0))


def _p2p_not_ok(config: RunConfig) -> tuple[str, ...]:
    """The chosen GPU pairs whose peer-to-peer status (NVML, ``links.topology``) is not OK."""
    if len(config.gpus) < 2 or config.mode not in ("dp", "ddp"):
        return ()
    topo, _ = links.topology(tuple(config.gpus))
    if not topo:
        return ()
    order, p2p = topo["gpus"], topo["p2p"]
    return tuple(
        f"{a}-{b} ({p2p[i][j]})"
        for i, a in enumerate(order)
        for j, b in enumerate(order)
        if i < j and p2p[i][j] not in ("OK", "X")
    )


def machine_facts(
    config: RunConfig,
    gpus: Iterable[Any] | None = None,
    free: Callable[[Path], int | None] | None = None,
) -> MachineFacts:
    """The facts for ``config``'s GPUs (read now when ``gpus``, device records, are not given)
    and its runs folder's disk (``free``: how its free bytes are read, ``disk``'s by default)."""
    room = disk.facts(config, free)
    if not config.gpus:
        return MachineFacts(**room)
    records = (
        devices.read_gpus(tuple(config.gpus), with_processes=False) if gpus is None else tuple(gpus)
    )
    free: dict[int, float] = {}
    for g in records:
        total, used = getattr(g, "mem_total_mib", None), getattr(g, "mem_used_mib", None)
        if g.index in config.gpus and total is not None and used is not None:
            free[g.index] = total - used
    driver = devices.cuda_driver_version()
    torch_cuda = estimate.torch_cuda_version() if driver else None
    need: dict[int, estimate.Estimate] = {}
    if free:
        try:
            need = estimate.per_gpu(config)
        except (ValueError, RuntimeError, TypeError) as e:  # a config the validation refuses anyway
            log.info("no memory estimate for this config: %s", e)
    return MachineFacts(
        driver,
        torch_cuda,
        free,
        {g: e.total_mib for g, e in need.items()},
        {g: e.describe() for g, e in need.items()},
        **room,
        p2p_not_ok=_p2p_not_ok(config),
        bf16_slow=_bf16_slow(config),
    )


def refusals(config: RunConfig, facts: MachineFacts) -> list[ConfigError]:
    """The seeds' refusals that need the machine: a driver too old for PyTorch's CUDA, a GPU too
    full."""
    out: list[ConfigError] = []
    d, t = facts.driver_cuda, facts.torch_cuda
    if config.gpus and d and t and d[0] < t[0]:
        out.append(
            ConfigError(
                "gpus",
                f"the NVIDIA driver supports CUDA up to {d[0]}.{d[1]} but this PyTorch is "
                f"built for CUDA {t[0]}.{t[1]}, so CUDA cannot start: update the driver, "
                f"install a PyTorch built for CUDA {d[0]}.x, or leave gpus empty for the CPU",
            )
        )
    for g, (major, minor) in facts.bf16_slow:
        out.append(
            ConfigError(
                "precision",
                f"bf16 needs compute capability 8.0 or newer (Ampere) and GPU {g} is "
                f"{major}.{minor}, where bf16 is emulated and slow: use precision fp16, or other "
                "GPUs",
            )
        )
    for g in config.gpus:
        free, need = facts.free_mib.get(g), facts.need_mib.get(g)
        if free is not None and need is not None and free < need:
            what = f" ({facts.need_text[g]})" if facts.need_text.get(g) else ""
            out.append(
                ConfigError(
                    "batch_size",
                    f"GPU {g} has {estimate.mib_text(free)} free but this run needs at "
                    f"least {estimate.mib_text(need)} there{what}: lower the batch size "
                    "or image size, turn on amp, use more GPUs, or free that GPU",
                )
            )
    return out


def _is_loopback(endpoint: str) -> bool:
    host = endpoint.rpartition(":")[0].strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: not resolved here (a lookup could hang the page)
        return False


def warning_lines(config: RunConfig, snapshot: DeviceSnapshot, facts: MachineFacts) -> list[str]:
    """The seeds' warnings: lines that start "Warning:"; the run may still start."""
    c, out = config, []
    d, t = facts.driver_cuda, facts.torch_cuda
    if c.gpus and d and t and d[0] == t[0] and d < t:
        out.append(
            f"Warning: the NVIDIA driver supports CUDA {d[0]}.{d[1]}, older than the "
            f"{t[0]}.{t[1]} this "
            "PyTorch is built for: CUDA's minor-version compatibility starts it, but kernels "
            "compiled just in "
            "time may fail; update the driver."
        )
    for g in c.gpus:
        free, need = facts.free_mib.get(g), facts.need_mib.get(g)
        if free is not None and need is not None and need <= free < need + CONTEXT_MIB:
            out.append(
                f"Warning: GPU {g} has {estimate.mib_text(free)} free, within {CONTEXT_MIB} MiB "
                "of the "
                f"{estimate.mib_text(need)} this run needs: the CUDA context and the allocator's "
                "slack may "
                "not fit; lower the batch size or free that GPU."
            )
    if facts.p2p_not_ok and c.nccl_preset != "p2p-off":
        out.append(
            "Warning: NVML says peer-to-peer reads are not OK between GPUs "
            f"{', '.join(facts.p2p_not_ok)}: if NCCL hangs or is slow, launch with "
            "--nccl-preset p2p-off (NCCL_P2P_DISABLE=1)."
        )
    full = disk.warning(facts.disk_free, facts.disk_need, facts.disk_text, facts.disk_folder)
    if full:
        out.append(full)
    if c.nnodes > 1 and _is_loopback(c.rdzv_endpoint or ""):
        out.append(
            f"Warning: the rendezvous host of {c.rdzv_endpoint} is this machine's loopback: only "
            "nodes started "
            "on this machine can join; other machines need an address of node 0 they can reach, "
            "e.g. "
            "10.0.0.1:29400."
        )
    for g in c.gpus:
        for h in holders(snapshot, (g,)):
            out.append(
                f"Warning: GPU {g} is already in use ({h}): the run will share its memory and "
                "compute "
                "(slower, and out of memory if both grow); pick a free GPU or stop that process "
                "first."
            )
    return out


def preflight(
    config: RunConfig, snapshot: DeviceSnapshot, facts: MachineFacts | None = None
) -> list[str]:
    """Plain-words lines: devices, per-device batch, backend, the traps that apply, then what is
    refused or warned."""
    facts = machine_facts(config, getattr(snapshot, "gpus", ())) if facts is None else facts
    out = _describe(config, snapshot) + _knob_lines(config)
    same: dict[tuple[str, str], list[str]] = {}  # DDP's GPUs all need the same: one line for them
    for g, n in facts.need_mib.items():
        same.setdefault((estimate.mib_text(n), facts.need_text.get(g, "")), []).append(str(g))
    out += [
        f"Memory: at least {n} on GPU {', '.join(gs)} ({what}), before the CUDA context."
        for (n, what), gs in same.items()
    ]
    out += [f"Refused: {e.message}." for e in refusals(config, facts)]
    return out + warning_lines(config, snapshot, facts)


def _knob_lines(c: RunConfig) -> list[str]:
    """What the performance knobs do to this run: precision, accumulation, the NCCL preset."""
    out: list[str] = []
    if c.precision != "fp32":
        out.append(
            f"Precision {c.precision}: autocast"
            + (" with a GradScaler." if c.precision == "fp16" else ", no scaler.")
        )
    if isinstance(c.accum_steps, int) and c.accum_steps > 1:
        per = c.batch_size // max(1, c.world_size) if c.mode == "ddp" else c.batch_size
        out.append(
            f"Gradient accumulation: {c.accum_steps} micro-batches of {per // c.accum_steps} per "
            f"process make each optimizer step of the global batch {c.batch_size}"
            + (
                "; DDP all-reduces once per step (the others run inside no_sync())."
                if c.mode == "ddp"
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
        elif c.mode == "single":
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
    if c.mode == "single":
        out.append(f"One process on one device; batch {b} per step.")
    elif c.mode == "dp":
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
        world = c.nproc * c.nnodes
        backend = "nccl" if gpus else "gloo"
        where = "one per GPU" if gpus else "on the CPU"
        out.append(
            f"DDP: {world} processes ({c.nproc} per node x {c.nnodes} "
            f"node{'s' if c.nnodes > 1 else ''}, "
            f"{where}) started by torchrun; {b // max(1, world)} samples per process per step; "
            f"backend {backend}."
        )
        if not gpus:
            cores = os.cpu_count() or 1
            out.append(
                f"DDP on the CPU uses gloo: {c.nproc} processes share {cores} cores "
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
    if gpus:
        out += [f"Cannot see: {line}." for line in limits(snapshot, tuple(gpus))]
    if c.amp:
        out.append(
            "AMP: fp16 autocast with a GradScaler on CUDA"
            if gpus
            else "AMP on the CPU: bf16 autocast"
        )
    return out
