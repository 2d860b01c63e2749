"""The Compare page's table: every figure of a run, speedup and efficiency against a baseline, the
columns.

This module owns the numbers the Compare page and the HTML export show of
each run: throughput, speedup, scaling efficiency, per-device peak memory
and its imbalance, final loss and accuracy, how long the loss agrees with
the baseline's; which run is the baseline by default; the table's columns,
their order and formats are in ``lab.views.compare.columns``.
Runs are ``lab.views.compare.runs.CompareRun``; scalar series (from
``lab.events``) come as plain mappings of tag -> series with ``.step``,
``.wall_time`` and ``.value`` arrays, so every number is testable without a
browser. Definitions (also shown on the page, ``HOW_TO_READ``):

- steady throughput = the median of the logging windows' samples/s (the
  first window left out), with its 95% interval (``lab.views.compare.noise``); the
  whole run's steady samples/s where no window is known;
- figures = ``measured`` (summary.json) or ``derived``: a run without
  summary.json (a user's script, foreign logs, a run that did not finish)
  gets what ``lab.views.compare.derived`` can honestly derive from its events and the
  supervisor's records: throughput from a tag the user picks, steps/s from
  its loss tag's step rate, wall time, NVML's used memory per GPU;
- speedup = steady throughput / the baseline's steady throughput, with the
  interval of ``lab.views.compare.spread.ratio`` and the "within noise" verdict; where
  either run has no samples/s, steps/s / the baseline's steps/s, and the
  ``speedup of`` column says which (``lab.views.compare.speed``);
- scaling efficiency = speedup / (devices / baseline devices), i.e.
  speedup / number of devices when the baseline is a one-device run, for a
  run that keeps the baseline's global batch (strong scaling); throughput per
  device / the baseline's for one that keeps its batch per device (weak);
  none for a run that keeps neither (``lab.views.compare.scaling``); a run's devices
  are every device of every node (``device_count``);
- mean utilisation per GPU and overall, or the CPU share of a CPU run
  (``lab.views.compare.utilisation``), and exposed communication as a share of the
  step of a profiled run (``lab.views.compare.anatomy``);
- memory imbalance = (max - min) / mean of the per-device peak memory;
- loss matches baseline to step = the last logged step up to which the run's
  ``train/loss`` stays within 0.1% (relative) of the baseline's at every
  common step: "is our DDP really DDP", made a number.

Tested by tests/test_compare.py.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from lab.views.compare import anatomy, derived, noise, scaling, utilisation
from lab.views.compare.columns import (
    COLUMNS_AFTER_DEVICES,
    COLUMNS_BEFORE_DEVICES,
    COLUMNS_WHY,
    PEAK_PREFIX,
    TEXT_COLUMNS,
    UTIL_PREFIX,
)
from lab.views.compare.runs import CompareRun, labels
from lab.views.compare.speed import Speed, speed

HOW_TO_READ = """\
**Speedup** is a run's steady-state throughput (samples per second, without the
warm-up steps) divided by the baseline's. **Scaling efficiency** is the speedup
divided by the number of devices (relative to the baseline's; under weak
scaling, throughput per device against the baseline's): 1.0 means every
added device paid for itself fully, 0.5 means half of it went to communication,
waiting or a bottleneck such as DataParallel's single process. **Memory
imbalance** is (max − min) / mean of the per-device peak memory: DataParallel
keeps the model, the outputs and the loss on the first device, so its first
device holds more (imbalance well above 0), while DDP's ranks hold about the
same (close to 0). Steady throughput and memory are only comparable between
runs of the same model, dataset, global batch and precision: the warnings say
when they are not."""

AGREEMENT_RTOL = 1e-3


# ---- per-run figures -----------------------------------------------------


def _last(series: Mapping[str, Any] | None, tag: str) -> float | None:
    s = (series or {}).get(tag)
    if s is None or len(s.value) == 0:
        return None
    return float(s.value[-1])


def _measured(run: CompareRun, scalars: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of summary.json; the throughput is the median of its steady windows where
    known."""
    s = run.summary or {}
    peaks = {str(k): float(v) for k, v in (s.get("peak_mem_mib") or {}).items() if v is not None}
    throughput = s.get("steady_throughput_samples_per_sec") or s.get("throughput_samples_per_sec")
    spread = noise.run_spread(run, scalars)
    throughput = spread.median if spread is not None else throughput
    return {
        "throughput": None if throughput is None else float(throughput),
        "spread": spread,
        "throughput of": None if throughput is None else derived.SAMPLES,
        "epoch time": None if s.get("epoch_time_s") is None else float(s["epoch_time_s"]),
        "peaks": peaks,
        "peaks of": derived.PEAKS_ALLOCATOR if peaks else None,
        "devices": list(s.get("devices") or sorted(peaks)),
        "world size": s.get("world_size"),
    }


def run_metrics(
    run: CompareRun,
    scalars: Mapping[str, Any] | None = None,
    throughput_tag: str | None = None,
    loss_tag: str | None = None,
) -> dict[str, Any]:
    """The baseline-independent figures of one run.

    From summary.json; for a run without one (a user's script, foreign logs,
    or a trainer run failed, stopped or still running) derived from its event
    series and the supervisor's records (``lab.views.compare.derived.from_events``:
    throughput from ``throughput_tag`` or ``perf/samples_per_sec``, peak
    memory, devices), with the last losses and accuracy. Every run gets
    ``lab.views.compare.derived.common``: ``figures``, ``wall time``, ``steps/s`` of
    ``loss_tag`` (or its own loss tag) and its spread.
    """
    s = run.summary or {}
    final = s.get("final") or {}
    sc = scalars or {}
    figures = _measured(run, sc) if s else derived.from_events(run, sc, throughput_tag)
    return {
        "mode": s.get("mode") or run.option("mode"),
        "effective mode": s.get("effective_mode"),
        "effective mode reason": s.get("effective_mode_reason"),
        "global batch": s.get("global_batch") or run.option("batch_size"),
        "per-device batch": s.get("per_device_batch"),
        **figures,
        **derived.common(run, sc, loss_tag),
        "final train loss": final.get("train_loss", _last(sc, "train/loss")),
        "final val loss": final.get("val_loss", _last(sc, "val/loss")),
        "final val acc": final.get("val_acc", _last(sc, "val/acc")),
    }


def speedup(throughput: float | None, baseline_throughput: float | None) -> float | None:
    """Throughput relative to the baseline's; None when either is unknown or zero."""
    if not throughput or not baseline_throughput:
        return None
    return float(throughput) / float(baseline_throughput)


def imbalance(peaks: Mapping[str, float]) -> float | None:
    """(max - min) / mean of per-device peak memory; None with fewer than two devices."""
    vals = [float(v) for v in peaks.values() if v is not None]
    if len(vals) < 2 or np.mean(vals) <= 0:
        return None
    return (max(vals) - min(vals)) / float(np.mean(vals))


def loss_agreement(series: Any, baseline_series: Any, rtol: float = AGREEMENT_RTOL) -> int | None:
    """The last common step up to which ``series`` agrees with ``baseline_series`` within ``rtol``.

    Both are scalar series (``.step``, ``.value``); only the steps both logged
    are compared. None when they share no step or already differ at the first.
    Runs of different modes with the same seed and global batch compute the
    same steps, so they agree to float rounding at first; rounding differences
    between reduction orders then grow as training goes on.
    """
    if series is None or baseline_series is None:
        return None
    steps, ia, ib = np.intersect1d(
        np.asarray(series.step),
        np.asarray(baseline_series.step),
        assume_unique=False,
        return_indices=True,
    )
    if len(steps) == 0:
        return None
    a = np.asarray(series.value, dtype=float)[ia]
    b = np.asarray(baseline_series.value, dtype=float)[ib]
    rel = np.abs(a - b) / np.maximum(np.abs(b), 1e-12)
    bad = np.flatnonzero(~(rel <= rtol))  # NaN counts as disagreement
    if len(bad) == 0:
        return int(steps[-1])
    return None if bad[0] == 0 else int(steps[bad[0] - 1])


def choose_baseline(runs: Sequence[CompareRun]) -> str | None:
    """The default baseline key: a run asked and run as ``single``, else the one with fewest
    devices."""
    if not runs:
        return None

    def rank(r: CompareRun) -> tuple:
        m = run_metrics(r)
        asked_single = m["mode"] == "single" and m["effective mode"] in (None, "single")
        return (not asked_single, len(m["devices"]) or 99, r.created_at)

    return min(runs, key=rank).key


def run_speed(m: Mapping[str, Any], base: Mapping[str, Any]) -> Speed:
    """A run's speedup and efficiency against the baseline on the figure both have
    (``compare_speed``)."""
    return speed(m, base, device_count(m), device_count(base))


def _speed_cells(
    r: CompareRun, m: Mapping[str, Any], base: Mapping[str, Any], is_baseline: bool
) -> dict[str, Any]:
    """The row's cells up to the per-device memory: what ran, throughput, speedup, efficiency, their
    noise."""
    sp = run_speed(m, base)
    cells = noise.cells(sp.ratio, sp.speedup, sp.factor, is_baseline, noise.run_interference(r))
    # neither scaling applies: no efficiency, so no interval for it either
    if sp.efficiency is None:
        cells[noise.EFFICIENCY_CI] = ""
    label = scaling.label(r.scaling, sp.related)
    return {
        "figures": m["figures"],
        "mode": m["mode"],
        "effective mode": m["effective mode"],
        "devices": ", ".join(m["devices"]),
        "world size": m["world size"],
        "global batch": m["global batch"],
        "per-device batch": m["per-device batch"],
        "throughput (samples/s)": m["throughput"],
        "steps/s": m["steps/s"],
        "speedup of": sp.of,
        "speedup": sp.speedup,
        "efficiency": sp.efficiency,
        "scaling": f"{label} (assumed)" if sp.assumed and label else label,
        **cells,
        "wall time (s)": m["wall time"],
        "epoch time (s)": m["epoch time"],
    }


def compare_table(
    runs: Sequence[CompareRun],
    baseline_key: str | None = None,
    scalars: Mapping[str, Mapping[str, Any]] | None = None,
    throughput_tag: str | None = None,
    loss_tag: str | None = None,
) -> pd.DataFrame:
    """One row per run with the columns listed at the top of this module.

    ``scalars`` maps a run key to its event series: the source of the figures
    of runs without a summary.json, of steps/s and of the loss agreement
    column. ``throughput_tag`` and ``loss_tag`` choose the derived figures
    (``run_metrics``). The baseline defaults to ``choose_baseline``.
    """
    if not runs:
        return pd.DataFrame(columns=COLUMNS_BEFORE_DEVICES + COLUMNS_AFTER_DEVICES + COLUMNS_WHY)
    names = labels(runs)
    baseline_key = baseline_key if baseline_key in {r.key for r in runs} else choose_baseline(runs)
    metrics = {
        r.key: run_metrics(r, (scalars or {}).get(r.key), throughput_tag, loss_tag) for r in runs
    }
    base = metrics[baseline_key]
    all_devices = sorted({d for m in metrics.values() for d in m["peaks"]}, key=device_order)
    util = {r.key: utilisation.utilisation(r, (scalars or {}).get(r.key)) for r in runs}
    all_gpus = sorted({g for u in util.values() for g in u.per_gpu}, key=device_order)
    rows = []
    for r in runs:
        m = metrics[r.key]
        row = {"run": names[r.key], **_speed_cells(r, m, base, r.key == baseline_key)}
        row.update({PEAK_PREFIX + d: m["peaks"].get(d) for d in all_devices})
        row["memory imbalance"] = imbalance(m["peaks"])
        row["loss matches baseline to step"] = (
            None
            if r.key == baseline_key
            else loss_agreement(
                (scalars or {}).get(r.key, {}).get("train/loss"),
                (scalars or {}).get(baseline_key, {}).get("train/loss"),
            )
        )
        for c in ("final train loss", "final val loss", "final val acc"):
            row[c] = None if m[c] is None else float(m[c])
        row.update({UTIL_PREFIX + g: util[r.key].per_gpu.get(g) for g in all_gpus})
        row["mean util %"] = util[r.key].overall
        row["comm exposed % of step"] = anatomy.comm_share(anatomy.breakdown(r.run_dir, r.summary))
        rows.append(row)
    df = pd.DataFrame(
        rows,
        columns=COLUMNS_BEFORE_DEVICES
        + [PEAK_PREFIX + d for d in all_devices]
        + COLUMNS_AFTER_DEVICES
        + [UTIL_PREFIX + g for g in all_gpus]
        + COLUMNS_WHY,
    )
    # Numeric columns stay numeric (NaN for unknown) so CSV and sorting work.
    for c in df.columns:
        if c not in TEXT_COLUMNS:
            df[c] = pd.to_numeric(df[c], errors="coerce")
    return df


def device_count(metrics: Mapping[str, Any]) -> int:
    """The devices a run used, over all its nodes: its distinct device names, or its world size
    where that is more (a summary from before names were node-prefixed lists one node's GPUs for
    every node)."""
    return max(len(metrics["devices"]), int(metrics.get("world size") or 0)) or 1


def device_order(name: str) -> tuple:
    """Sort key for device names: ``cuda2`` before ``cuda10``, ``node2:cuda0`` before
    ``node10:cuda0``."""
    m = re.fullmatch(r"(?:(node|rank)(\d+):)?(\D*)(\d*)", name)
    if not m:
        return ("~", 0, name, -1)
    return (m[1] or "", int(m[2] or -1), m[3], int(m[4]) if m[4] else -1)


def table_csv(df: pd.DataFrame) -> bytes:
    """The table as UTF-8 CSV bytes, for a download button."""
    buf = io.StringIO()
    df.to_csv(buf, index=False)
    return buf.getvalue().encode("utf-8")
