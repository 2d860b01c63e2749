"""How busy a run kept its devices while it trained, and DataParallel's "only GPU 0 works" symptom.

From the supervisor's ``sys/`` samples: the mean utilisation of each GPU (physical index) and their
mean overall, or on a run without GPU samples its CPU share (its process tree's CPU use over the
cores the launcher gave it); means over the trainer's ``started_at`` to ``ended_at`` where samples
fall inside. A DataParallel run whose first GPU was over twice as busy as the others gets a warning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lab import tags
from lab.engine.spec.modes import DP
from lab.runfolder import parse_time
from lab.views.compare.runs import CompareRun
from lab.views.live.run_charts import SYS_METRICS

SM_LEAF = tags.SM_ACTIVE  # sys/gpu<i>/sm_active_pct: SM activity, where NVML's GPM has it
GPU0_FACTOR = 2.0  # "only GPU 0 works": its mean utilisation over this many times the others'
_UTIL = SYS_METRICS["util"]


@dataclass(frozen=True)
class Utilisation:
    """Mean utilisation in percent: per GPU (``gpu<i>``, physical index) and overall (GPUs' mean, or
    CPU share)."""

    per_gpu: dict[str, float]
    overall: float | None
    on_cpu: bool
    # SM activity (NVML GPM, ``sys/gpu<i>/sm_active_pct``) where the GPU supports it: utilisation
    # is kernel-active time, and NCCL's spinning kernels read 100%
    per_gpu_sm: dict[str, float] = field(default_factory=dict)


def _window(run: CompareRun) -> tuple[float, float] | None:
    s = run.summary or {}
    start, end = parse_time(s.get("started_at")), parse_time(s.get("ended_at"))
    return (start.timestamp(), end.timestamp()) if start and end and end > start else None


def _mean(series: Any, window: tuple[float, float] | None) -> float | None:
    values = np.asarray(series.value, dtype=float)
    if window is not None:
        t = np.asarray(series.wall_time, dtype=float)
        inside = values[(t >= window[0]) & (t <= window[1])]
        values = inside if len(inside) else values
    values = values[np.isfinite(values)]
    return float(values.mean()) if len(values) else None


def gpu_tag(index: int) -> str:
    """The sys/ tag of one GPU's utilisation samples."""
    return tags.sys_gpu(index, _UTIL.leaf)


def utilisation(run: CompareRun, scalars: Mapping[str, Any] | None) -> Utilisation:
    """The run's mean utilisation per GPU and overall, or its CPU share when it has no GPU
    samples."""
    sc = scalars or {}
    window = _window(run)
    per_gpu: dict[str, float] = {}
    per_sm: dict[str, float] = {}
    for tag in sorted(sc, key=lambda t: (len(t), t)):
        head, _, leaf = tag.rpartition("/")
        if (
            leaf in (_UTIL.leaf, SM_LEAF)
            and head.startswith(tags.SYS_GPU)
            and head[7:].isdigit()
            and len(sc[tag].value)
        ):
            mean = _mean(sc[tag], window)
            if mean is not None:
                (per_gpu if leaf == _UTIL.leaf else per_sm)[head[4:]] = mean
    if per_gpu:
        return Utilisation(per_gpu, float(np.mean(list(per_gpu.values()))), False, per_sm)
    cpu = sc.get(_UTIL.cpu_tag)
    mean = _mean(cpu, window) if cpu is not None and len(cpu.value) else None
    share = mean / run.cpu_cores if mean is not None and run.cpu_cores else None
    return Utilisation({}, share, share is not None)


def _dp_gpus(run: CompareRun) -> list[int]:
    """The physical GPUs a run that really ran DataParallel used, the first one (its device 0)
    first."""
    s = run.summary or {}
    if s.get("effective_mode") != DP:
        return []
    gpus = run.config.get("gpus") or []
    return [int(g) for g in gpus] if len(gpus) >= 2 else []


def _activity(util: Utilisation, gpus: list[int]) -> tuple[dict[str, float], str]:
    """Each GPU's busyness: SM activity where every one of ``gpus`` has it, else utilisation."""
    names = [f"gpu{g}" for g in gpus]
    if names and all(n in util.per_gpu_sm for n in names):
        return util.per_gpu_sm, "SM activity"
    return util.per_gpu, "utilisation"


def _memory_spread(run: CompareRun) -> tuple[float, float] | None:
    """(device 0's peak MiB, the other devices' mean) from summary.json's ``peak_mem_mib``."""
    peak = (run.summary or {}).get("peak_mem_mib") or {}
    vals = [float(v) for _, v in sorted(peak.items()) if isinstance(v, (int, float))]
    return (vals[0], float(np.mean(vals[1:]))) if len(vals) >= 2 else None


def gpu0_busy(run: CompareRun, util: Utilisation) -> tuple[str, float, float] | None:
    """``(gpu, its mean, the others' mean)`` when a DP run kept its first GPU over twice as busy as
    the others: by SM activity where the GPUs have it (utilisation counts NCCL's spinning kernels),
    else utilisation; and not when summary.json's per-device peaks say device 0 held less
    memory than the others (DP's scatter, gather and loss live on device 0)."""
    gpus = _dp_gpus(run)
    busy, _ = _activity(util, gpus)
    first = f"gpu{gpus[0]}" if gpus else None
    others = [busy[f"gpu{g}"] for g in gpus[1:] if f"gpu{g}" in busy]
    if first not in busy or not others:
        return None
    rest = float(np.mean(others))
    mem = _memory_spread(run)
    if mem is not None and mem[0] < mem[1]:
        return None
    return (first, busy[first], rest) if busy[first] > GPU0_FACTOR * rest else None


def gpu0_warnings(
    runs: Sequence[CompareRun], names: Mapping[str, str], utils: Mapping[str, Utilisation]
) -> list[str]:
    """One sentence per DataParallel run whose first GPU did most of the work (``utils``: each
    run's ``utilisation`` by key)."""
    out = []
    for r in runs:
        found = gpu0_busy(r, utils[r.key])
        if found:
            gpu, first, rest = found
            what = _activity(utils[r.key], _dp_gpus(r))[1]
            mem = _memory_spread(r)
            held = (
                f", and it held {mem[0]:.0f} MiB at its peak against {mem[1]:.0f} MiB"
                if mem
                else ""
            )
            out.append(
                f"Only {gpu} works in {names[r.key]}: under DataParallel its mean {what} was "
                f"{first:.0f}% against {rest:.0f}% on the other GPUs{held}. One Python process "
                "scatters "
                "the batch, "
                f"replicates the model and gathers the outputs on {gpu} every step, and computes "
                "the loss "
                "and the update there while the others wait; DDP runs one process per GPU and "
                "keeps each "
                "busy."
            )
    return out
