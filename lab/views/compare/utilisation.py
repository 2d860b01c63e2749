"""How busy a run kept its devices while it trained, and DataParallel's "only GPU 0 works" symptom.

From the supervisor's ``sys/`` samples: the mean utilisation of each GPU (physical index) and their
mean overall, or on a run without GPU samples its CPU share (its process tree's CPU use over the
cores the launcher gave it); means over the trainer's ``started_at`` to ``ended_at`` where samples
fall inside. A DataParallel run whose first GPU was over twice as busy as the others gets a warning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lab import tags
from lab.engine.launch.config import DP
from lab.runfolder import parse_time
from lab.views.compare.runs import CompareRun
from lab.views.live.run_charts import SYS_METRICS

GPU0_FACTOR = 2.0  # "only GPU 0 works": its mean utilisation over this many times the others'
_UTIL = SYS_METRICS["util"]


@dataclass(frozen=True)
class Utilisation:
    """Mean utilisation in percent: per GPU (``gpu<i>``, physical index) and overall (GPUs' mean, or
    CPU share)."""

    per_gpu: dict[str, float]
    overall: float | None
    on_cpu: bool


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
    for tag in sorted(sc, key=lambda t: (len(t), t)):
        head, _, leaf = tag.rpartition("/")
        if (
            leaf == _UTIL.leaf
            and head.startswith(tags.SYS_GPU)
            and head[7:].isdigit()
            and len(sc[tag].value)
        ):
            mean = _mean(sc[tag], window)
            if mean is not None:
                per_gpu[head[4:]] = mean
    if per_gpu:
        return Utilisation(per_gpu, float(np.mean(list(per_gpu.values()))), False)
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


def gpu0_busy(run: CompareRun, util: Utilisation) -> tuple[str, float, float] | None:
    """``(gpu, its mean, the others' mean)`` when a DP run kept its first GPU over twice as busy as
    the others."""
    gpus = _dp_gpus(run)
    first = f"gpu{gpus[0]}" if gpus else None
    others = [util.per_gpu[f"gpu{g}"] for g in gpus[1:] if f"gpu{g}" in util.per_gpu]
    if first not in util.per_gpu or not others:
        return None
    rest = float(np.mean(others))
    return (first, util.per_gpu[first], rest) if util.per_gpu[first] > GPU0_FACTOR * rest else None


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
            out.append(
                f"Only {gpu} works in {names[r.key]}: under DataParallel its mean utilisation was "
                f"{first:.0f}% against {rest:.0f}% on the other GPUs. One Python process scatters "
                "the batch, "
                f"replicates the model and gathers the outputs on {gpu} every step, and computes "
                "the loss "
                "and the update there while the others wait; DDP runs one process per GPU and "
                "keeps each "
                "busy."
            )
    return out
