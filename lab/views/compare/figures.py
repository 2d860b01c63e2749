"""One run's figures, independent of any baseline: ``RunFigures``, built by ``run_figures``.

*Measured* from the trainer's summary.json (the throughput being the median of its steady logging
windows, with its interval), or *derived* from the events of a run without one
(``lab.views.compare.derived``); every run alike gets steps/s of its loss tag, wall time, final
losses, utilisation (``lab.views.compare.utilisation``) and, when profiled, its step's anatomy
(``lab.views.compare.anatomy``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lab import tags
from lab.views.compare import anatomy, derived
from lab.views.compare.runs import CompareRun
from lab.views.compare.spread import Spread, median_spread, order_ranks, steady_windows
from lab.views.compare.utilisation import Utilisation, utilisation


@dataclass(frozen=True)
class RunFigures:
    """What one run measured; None (or empty) where unknown."""

    figures: str = derived.DERIVED  # MEASURED (summary.json) or DERIVED (events)
    mode: str | None = None  # as asked
    effective_mode: str | None = None  # as run (summary.json)
    effective_mode_reason: str | None = None
    global_batch: Any = None
    per_device_batch: Any = None
    throughput: float | None = None  # steady samples/s, or the rate of a picked tag
    spread: Spread | None = None  # the throughput's median and interval
    throughput_of: str | None = None  # derived.SAMPLES, or the picked tag
    steps_per_sec: float | None = None  # the step rate of ``loss_tag``
    steps_spread: Spread | None = None
    loss_tag: str | None = None
    wall_time_s: float | None = None
    epoch_time_s: float | None = None
    peaks: dict[str, float] = field(default_factory=dict)  # peak MiB by device
    peaks_of: str | None = None  # derived.PEAKS_ALLOCATOR or derived.PEAKS_NVML
    devices: list[str] = field(default_factory=list)
    world_size: int | None = None
    final_train_loss: float | None = None
    final_val_loss: float | None = None
    final_val_acc: float | None = None
    utilisation: Utilisation = field(default_factory=lambda: Utilisation({}, None, False))
    profile: dict | None = None  # breakdown.json of a profiled run
    comm_exposed_pct: float | None = None  # exposed communication, % of the profiled step

    @property
    def device_count(self) -> int:
        """The devices a run used, over all its nodes: its distinct device names, or its world size
        where that is more (a summary from before names were node-prefixed lists one node's GPUs for
        every node)."""
        return max(len(self.devices), int(self.world_size or 0)) or 1

    @property
    def imbalance(self) -> float | None:
        """(max - min) / mean of the per-device peak memory."""
        return imbalance(self.peaks)

    @property
    def batches_seen(self) -> bool:
        """Whether the run's global or per-device batch is known."""
        return self.global_batch is not None or self.per_device_batch is not None


def imbalance(peaks: Mapping[str, float]) -> float | None:
    """(max - min) / mean of per-device peak memory; None with fewer than two devices."""
    vals = [float(v) for v in peaks.values() if v is not None]
    if len(vals) < 2 or np.mean(vals) <= 0:
        return None
    return (max(vals) - min(vals)) / float(np.mean(vals))


def device_order(name: str) -> tuple:
    """Sort key for device names: ``cuda2`` before ``cuda10``, ``node2:cuda0`` before
    ``node10:cuda0``."""
    m = re.fullmatch(r"(?:(node|rank)(\d+):)?(\D*)(\d*)", name)
    if not m:
        return ("~", 0, name, -1)
    return (m[1] or "", int(m[2] or -1), m[3], int(m[4]) if m[4] else -1)


def global_batch(run: CompareRun) -> Any:
    """The global batch the run trained with: summary.json's, else the asked one."""
    return (run.summary or {}).get("global_batch") or run.option("batch_size")


def run_spread(run: CompareRun, scalars: Mapping[str, Any] | None = None) -> Spread | None:
    """The run's steady throughput spread: summary.json's ``throughput``, else from its
    ``tags.SAMPLES_PER_SEC`` events; None if unknown."""
    tp = (run.summary or {}).get("throughput")
    if isinstance(tp, dict) and tp.get("median") and tp.get("windows"):
        n = int(tp["windows"])
        return Spread(
            float(tp["median"]),
            float(tp["ci_low"]),
            float(tp["ci_high"]),
            n,
            round(order_ranks(n)[1], 4),
        )
    series = (scalars or {}).get(tags.SAMPLES_PER_SEC)
    compiled = (run.summary or {}).get("compile_windows") or ()
    if series is not None and len(series.value):
        return median_spread(steady_windows(series.step, series.value, compiled))
    return None


def _measured(run: CompareRun, scalars: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of summary.json; the throughput is the median of its steady windows where
    known."""
    s = run.summary or {}
    peaks = {str(k): float(v) for k, v in (s.get("peak_mem_mib") or {}).items() if v is not None}
    throughput = s.get("steady_throughput_samples_per_sec") or s.get("throughput_samples_per_sec")
    spread = run_spread(run, scalars)
    throughput = spread.median if spread is not None else throughput
    return {
        "throughput": None if throughput is None else float(throughput),
        "spread": spread,
        "throughput_of": None if throughput is None else derived.SAMPLES,
        "epoch_time_s": None if s.get("epoch_time_s") is None else float(s["epoch_time_s"]),
        "peaks": peaks,
        "peaks_of": derived.PEAKS_ALLOCATOR if peaks else None,
        "devices": list(s.get("devices") or sorted(peaks)),
        "world_size": s.get("world_size"),
    }


def _from_events(
    run: CompareRun, scalars: Mapping[str, Any], throughput_tag: str | None
) -> dict[str, Any]:
    """The figures a run without summary.json has in its events: throughput of the picked tag (else
    the trainer's samples/s), epoch time, peak memory (the allocator's, else NVML's), devices."""
    tag = derived.rate_tag(throughput_tag, scalars)
    throughput, spread = derived.tag_rate(scalars.get(tag)) if tag else (None, None)
    et = scalars.get(tags.EPOCH_TIME_S)
    peaks, peaks_of = derived.allocator_peaks(scalars), derived.PEAKS_ALLOCATOR
    if not peaks:
        peaks, peaks_of = derived.nvml_peaks(scalars), derived.PEAKS_NVML
    # the trainer names the devices it measured; of anything else the lab knows only what it gave or
    # sampled
    devices, world = (
        (sorted(peaks), None)
        if peaks_of == derived.PEAKS_ALLOCATOR and derived.sees_config(run)
        else ([], None)
    )
    if not devices:
        devices, world = derived.seen_devices(run, scalars)
    return {
        "throughput": throughput,
        "spread": spread,
        "throughput_of": None
        if throughput is None
        else (derived.SAMPLES if tag == tags.SAMPLES_PER_SEC else tag),
        "epoch_time_s": float(np.mean(et.value)) if et is not None and len(et.value) else None,
        "peaks": peaks,
        "peaks_of": peaks_of if peaks else None,
        "devices": devices,
        "world_size": world,
    }


def _final(value: Any) -> float | None:
    return None if value is None else float(value)


def _last(scalars: Mapping[str, Any], tag: str) -> float | None:
    s = scalars.get(tag)
    if s is None or len(s.value) == 0:
        return None
    return float(s.value[-1])


def run_figures(
    run: CompareRun,
    scalars: Mapping[str, Any] | None = None,
    throughput_tag: str | None = None,
    loss_tag: str | None = None,
) -> RunFigures:
    """One run's figures from its summary.json or, without one, its event series ``scalars``.

    ``throughput_tag``: the throughput of a run without summary.json (``derived.STEP_RATE``: none,
    steps/s only); ``loss_tag``: the tag whose step rate is steps/s (else the run's own first loss
    tag).
    """
    s = run.summary or {}
    final = s.get("final") or {}
    sc = scalars or {}
    tag = derived.loss_tag_of(sc, loss_tag)
    rate, rate_spread = derived.step_rate(sc.get(tag)) if tag else (None, None)
    profile = anatomy.breakdown(run.run_dir, run.summary)
    return RunFigures(
        figures=derived.figures(run),
        mode=s.get("mode") or run.option("mode"),
        effective_mode=s.get("effective_mode"),
        effective_mode_reason=s.get("effective_mode_reason"),
        global_batch=global_batch(run),
        per_device_batch=s.get("per_device_batch"),
        **(_measured(run, sc) if s else _from_events(run, sc, throughput_tag)),
        steps_per_sec=rate,
        steps_spread=rate_spread,
        loss_tag=tag,
        wall_time_s=derived.wall_time(run, sc),
        final_train_loss=_final(final.get("train_loss", _last(sc, tags.TRAIN_LOSS))),
        final_val_loss=_final(final.get("val_loss", _last(sc, tags.VAL_LOSS))),
        final_val_acc=_final(final.get("val_acc", _last(sc, tags.VAL_ACC))),
        utilisation=utilisation(run, sc),
        profile=profile,
        comm_exposed_pct=anatomy.comm_share(profile),
    )
