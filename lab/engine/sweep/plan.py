"""The configs of a "Compare modes" sweep: the modes, strong or weak scaling, repeats.

``compare_modes_configs`` gives single, DP and DDP (FSDP when asked) of the same model, data
and seed on the usable GPUs (or the CPU), under strong scaling (every mode
keeps the global batch, so they compute the same training) or weak scaling
(every device keeps its batch, ``scaled``); ``interleaved`` repeats them in
turn (single, dp, ddp, single, …) so drift on the machine hits every mode
alike. Launching a sweep is ``lab.engine.launch.sweeps.launch_sweep``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from lab.engine.spec.modes import DP, SINGLE, SWEEP_DEFAULT, torchrun
from lab.engine.spec.run import CPU_DDP_PROCESSES, ConfigError, Gpus, RunConfig, usable
from lab.engine.spec.sweep import SCALINGS, STRONG, WEAK

MAX_REPEATS = 20


def scaled(config: RunConfig, scaling: str) -> RunConfig:
    """``config`` in a sweep of ``scaling``: strong keeps its global batch, weak makes it the batch
    per device."""
    if scaling not in SCALINGS:
        raise ConfigError(
            "scaling",
            f"unknown scaling {scaling!r}: use strong (same global batch) or weak "
            "(same batch per device)",
        )
    if scaling == WEAK:
        return dataclasses.replace(config, batch_size=config.batch_size * config.world_size)
    return config


def compare_modes_configs(
    base: RunConfig,
    gpus: Gpus,
    scaling: str = STRONG,
    modes: tuple[str, ...] | list[str] = SWEEP_DEFAULT,
) -> list[RunConfig]:
    """Configs of ``modes`` (single, DP and DDP unless asked) of the same model, data and seed,
    under ``scaling``.

    With GPUs: single on the first usable GPU, DP, DDP and FSDP over all of them. Without:
    everything on the CPU, DDP and FSDP as two gloo processes (DP falls back to one device).
    ``base.batch_size`` is every mode's global batch (strong) or every device's batch (weak,
    ``scaled``)."""
    gpus = usable(gpus)
    nproc = len(gpus) or CPU_DDP_PROCESSES
    stem = base.name or base.sweep_stem
    common = dict(nnodes=1, node_rank=0, rdzv_endpoint="")
    return [
        scaled(
            dataclasses.replace(
                base,
                mode=mode,
                gpus=gpus[:1] if mode == SINGLE else gpus,
                nproc=nproc if torchrun(mode) else 1,
                name=f"{stem}-{mode}"[:40],
                **common,
            ),
            scaling,
        )
        for mode in modes
    ]


def interleaved(configs: list[RunConfig], repeats: int) -> list[RunConfig]:
    """``configs`` ``repeats`` times in turn (a, b, c, a, b, c, ...), so drift hits every config
    alike.

    Repeated runs are named ``<name>-r1``, ``<name>-r2``, ...; one repeat
    returns the configs as they are. A bad count is a ``ConfigError``.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS:
        raise ConfigError(
            "repeats",
            f"{repeats!r} is not a number of repeats: use 1 to {MAX_REPEATS} (3 shows the "
            "spread between runs)",
        )
    if repeats == 1:
        return list(configs)
    return [
        dataclasses.replace(c, name=f"{(c.name or c.mode)[:36]}-r{i + 1}")
        for i in range(repeats)
        for c in configs
    ]


def device_count_configs(
    base: Any,
    gpus: Gpus,
    modes: list[str],
    counts: list[int],
    scaling: str = STRONG,
    cpu_limit: int = 0,
) -> list[Any]:
    """Every mode at every device count: ``single`` once (one device), DP over the first N usable
    GPUs (on the CPU once, as it runs on one device there), DDP and FSDP over the first N GPUs, or
    as N gloo processes on the CPU (at most ``cpu_limit`` when given). A count beyond the machine
    is a ``ConfigError`` naming what exists. ``base`` is a trainer's ``RunConfig`` or a script's
    script run's (strong scaling only: a script's batch is its own)."""
    gpus = usable(gpus)
    bad = [n for n in counts if isinstance(n, bool) or not isinstance(n, int) or n < 1]
    if bad or not counts:
        raise ConfigError("devices", f"{counts!r}: use a comma list of device counts, e.g. 1,2,4")
    if gpus and max(counts) > len(gpus):
        raise ConfigError(
            "devices",
            f"count {max(counts)} is more than this machine's {len(gpus)} usable GPUs "
            f"({','.join(map(str, gpus))}): use counts up to {len(gpus)}",
        )
    if not gpus and cpu_limit and max(counts) > cpu_limit:
        raise ConfigError(
            "devices",
            f"count {max(counts)} is more than this machine's {cpu_limit} CPU cores (no GPU): "
            f"use DDP process counts up to {cpu_limit}",
        )
    stem = base.name or base.sweep_stem
    common = dict(nnodes=1, node_rank=0, rdzv_endpoint="")
    out = []
    for mode in modes:
        per_mode = [1] if mode == SINGLE or (mode == DP and not gpus) else sorted(set(counts))
        for n in per_mode:
            nproc = n if torchrun(mode) else 1
            c = dataclasses.replace(
                base,
                mode=mode,
                gpus=gpus[:n] if mode != SINGLE else gpus[:1],
                nproc=nproc,
                name=f"{stem}-{mode}x{n}"[:40],
                **common,
            )
            out.append(scaled(c, scaling))
    return out


def count_choices(gpus: Gpus, cpu_count: int) -> list[int]:
    """The device counts a sweep can take here: 1 to the usable GPUs, else 1 to the CPU cores (DDP
    processes)."""
    n = len(usable(gpus)) or max(1, cpu_count)
    return list(range(1, n + 1))


def slurm_count_configs(
    base: RunConfig, modes: list[str], counts: list[int], scaling: str = STRONG
) -> list[RunConfig]:
    """Every mode at every device count as Slurm jobs: a count up to ``base.gpus_per_node`` is that
    many GPUs on one node, a count beyond it whole nodes of them (DDP only: 8 with 4 GPUs per node
    is 2 nodes); on CPU nodes (``gpus_per_node`` 0) a count is DDP's processes on one node and DP
    runs once, on one device. ``single`` runs once."""
    bad = [n for n in counts if isinstance(n, bool) or not isinstance(n, int) or n < 1]
    if bad or not counts:
        raise ConfigError("devices", f"{counts!r}: use a comma list of device counts, e.g. 1,2,4")
    per_node = base.gpus_per_node
    out = []
    for mode in modes:
        one = mode == SINGLE or (mode == DP and not per_node)
        for n in [1] if one else sorted(set(counts)):
            nodes, gpus = (n // per_node, per_node) if per_node and n > per_node else (1, n)
            if per_node and n > per_node and (not torchrun(mode) or n % per_node):
                raise ConfigError(
                    "devices",
                    f"count {n} is more than a node's {per_node} GPUs: beyond one node only DDP "
                    f"and FSDP run, on whole nodes (counts that are multiples of {per_node})",
                )
            c = dataclasses.replace(
                base,
                mode=mode,
                gpus=(),
                nnodes=nodes,
                gpus_per_node=gpus if per_node else 0,
                nproc=gpus if torchrun(mode) else 1,
                name=f"{base.name or base.sweep_stem}-{mode}x{n}"[:40],
            )
            out.append(scaled(c, scaling))
    return out
