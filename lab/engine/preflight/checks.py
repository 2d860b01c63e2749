"""The pre-flight check: what a run will do on this machine, in plain words, before it starts.

``preflight(config, snapshot)`` gives ``lab.engine.preflight.describe``'s lines (the devices, the
batch each gets, the backend, the traps that apply, what the lab cannot see), the memory each GPU
needs, and the seeds' checks, each one line that says whether it refuses or warns:

- refused (``refusals``, which ``config.problems`` includes when given the
  facts, so the launch starts nothing): a driver whose CUDA major version is
  older than the one PyTorch is built for; free memory on a chosen GPU below
  the run's estimate (``lab.engine.preflight.estimate``: parameters, gradients,
  momentum and a batch of activations of the chosen model), naming fsdp where the same run fits
  sharded. DP asking for more GPUs than are visible is refused by ``config`` itself.
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

import dataclasses
import ipaddress
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from lab.engine.devices import links
from lab.engine.devices import nvml as devices
from lab.engine.devices.notes import holders
from lab.engine.devices.nvml import DeviceSnapshot
from lab.engine.preflight import describe, disk, estimate
from lab.engine.spec import modes
from lab.engine.spec.modes import FSDP, SINGLE
from lab.engine.spec.run import ConfigError, RunConfig

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
    # per chosen GPU, what the same run would need there under fsdp on the same GPUs (2 or more)
    fsdp_mib: Mapping[int, float] = field(default_factory=dict)


def _bf16_slow(config: RunConfig) -> tuple[tuple[int, tuple[int, int]], ...]:
    """The chosen GPUs that have no bf16 of their own (compute capability below 8.0: V100, T4),
    where ``torch.cuda.is_bf16_supported()`` still says yes and bf16 runs emulated."""
    if config.precision != "bf16":
        return ()
    caps = {g: devices.compute_capability(g) for g in config.gpus}
    return tuple((g, cc) for g, cc in caps.items() if cc is not None and cc < (8, 0))


def _p2p_not_ok(config: RunConfig) -> tuple[str, ...]:
    """The chosen GPU pairs whose peer-to-peer status (NVML, ``links.topology``) is not OK."""
    if len(config.gpus) < 2 or config.mode == SINGLE:
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
    sharded: dict[int, estimate.Estimate] = {}
    if free:
        try:
            need = estimate.per_gpu(config)
            if len(config.gpus) >= 2 and not modes.sharded(config.mode):
                n = len(config.gpus)
                sharded = estimate.per_gpu(dataclasses.replace(config, mode=FSDP, nproc=n))
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
        fsdp_mib={g: e.total_mib for g, e in sharded.items()},
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
                    "or image size, turn on amp, use more GPUs, or free that GPU"
                    + _fsdp_fits(facts, g, free),
                )
            )
    return out


def _fsdp_fits(facts: MachineFacts, g: int, free: float) -> str:
    """The suggestion of a refusal for memory, where the same run fits under fsdp."""
    sharded = facts.fsdp_mib.get(g)
    if sharded is None or sharded > free:
        return ""
    return (
        f"; or use mode fsdp on the same GPUs, which needs about {estimate.mib_text(sharded)} "
        "there (parameters, gradients and optimizer state sharded over the ranks)"
    )


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
    out = describe.lines(config, snapshot)
    same: dict[tuple[str, str], list[str]] = {}  # DDP's GPUs all need the same: one line for them
    for g, n in facts.need_mib.items():
        same.setdefault((estimate.mib_text(n), facts.need_text.get(g, "")), []).append(str(g))
    out += [
        f"Memory: at least {n} on GPU {', '.join(gs)} ({what}), before the CUDA context."
        for (n, what), gs in same.items()
    ]
    if facts.fsdp_mib:  # the trade, before it is needed
        most = estimate.mib_text(max(facts.fsdp_mib.values()))
        out.append(f"Memory under fsdp on the same GPUs: about {most} per GPU (sharded).")
    out += [f"Refused: {e.message}." for e in refusals(config, facts)]
    return out + warning_lines(config, snapshot, facts)
