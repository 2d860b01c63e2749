"""Side-by-side comparison of finished runs: the table, the fairness warnings, the curves.

This module owns every figure the Compare page and the HTML export show:
which runs to compare by default, which is the baseline, throughput, speedup,
scaling efficiency, per-device peak memory and its imbalance, final loss and
accuracy, and the warnings that say when two runs are not a fair comparison.
It reads ``run.json`` and ``summary.json`` itself and takes scalar series
(from ``lab.events``) as plain mappings of tag -> series with ``.step``,
``.wall_time`` and ``.value`` arrays, so every number is testable without a
browser. Definitions (also shown on the page):

- speedup = steady throughput / the baseline's steady throughput;
- scaling efficiency = speedup / (devices / baseline devices), i.e.
  speedup / number of devices when the baseline is a one-device run;
- memory imbalance = (max - min) / mean of the per-device peak memory;
- loss matches baseline to step = the last logged step up to which the run's
  ``train/loss`` stays within 0.1% (relative) of the baseline's at every
  common step: "is our DDP really DDP", made a number.
"""
from __future__ import annotations

import io
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lab.runfolder import read_json

log = logging.getLogger(__name__)

# Fixed columns of the table, in order; one "peak MiB <device>" column per
# device seen in any chosen run is inserted before "memory imbalance".
COLUMNS_BEFORE_DEVICES = [
    "run", "mode", "effective mode", "devices", "world size", "global batch",
    "per-device batch", "throughput (samples/s)", "speedup", "efficiency",
    "epoch time (s)",
]
COLUMNS_AFTER_DEVICES = [
    "memory imbalance", "loss matches baseline to step", "final train loss", "final val loss", "final val acc",
]
AGREEMENT_RTOL = 1e-3
PEAK_PREFIX = "peak MiB "


@dataclass(frozen=True)
class CompareRun:
    """One run as the Compare page sees it; ``key`` is unique across user and sample runs."""

    key: str
    run_id: str
    run_dir: Path
    name: str
    created_at: str
    sweep_id: str | None
    state: str | None
    config: dict = field(default_factory=dict)
    summary: dict | None = None
    recorded_on: str | None = None
    host: str | None = None
    sample: bool = False


@dataclass(frozen=True)
class FairnessWarning:
    """Why two chosen runs do not compare like for like; ``message`` is shown as is."""

    key: str
    message: str


def load_run(run_dir: Path, *, sample: bool = False) -> CompareRun | None:
    """A run folder as a ``CompareRun``, or None when it has neither run.json nor summary.json."""
    run_dir = Path(run_dir)
    meta = read_json(run_dir / "run.json")
    summary = read_json(run_dir / "summary.json")
    if meta is None and summary is None:
        return None
    meta = meta or {}
    status = read_json(run_dir / "status.json") or {}
    run_id = str(meta.get("run_id") or run_dir.name)
    config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    if not config and summary and isinstance(summary.get("config"), dict):
        config = summary["config"]
    return CompareRun(
        key=("sample/" if sample else "") + run_id,
        run_id=run_id,
        run_dir=run_dir,
        name=str(meta.get("name") or run_id),
        created_at=str(meta.get("created_at") or (summary or {}).get("started_at") or ""),
        sweep_id=meta.get("sweep_id"),
        state=status.get("state") or ("succeeded" if summary and summary.get("completed") else None),
        config=config,
        summary=summary,
        recorded_on=meta.get("recorded_on"),
        host=meta.get("host") or (summary or {}).get("hostname"),
        sample=sample,
    )


def load_runs(root: Path, *, sample: bool = False) -> list[CompareRun]:
    """Every run under ``root``, newest first; a missing folder is an empty list."""
    root = Path(root)
    if not root.is_dir():
        return []
    runs = [r for d in sorted(root.iterdir()) if d.is_dir() and (r := load_run(d, sample=sample))]
    return sorted(runs, key=lambda r: (r.created_at, r.run_id), reverse=True)


def available_runs(user_root: Path, sample_root: Path) -> list[CompareRun]:
    """The user's runs (newest first), then the shipped sample runs."""
    return load_runs(user_root) + load_runs(sample_root, sample=True)


def default_selection(runs: Sequence[CompareRun]) -> list[str]:
    """Keys to compare by default.

    The newest sweep among the user's own runs; without a sweep, the user's
    newest (up to 4) runs that have a summary; with no runs of the user's own,
    the sample runs.
    """
    own = [r for r in runs if not r.sample]
    swept = [r for r in own if r.sweep_id]
    if swept:
        newest = max(swept, key=lambda r: (r.created_at, r.run_id)).sweep_id
        return [r.key for r in sorted(swept, key=lambda r: r.created_at) if r.sweep_id == newest]
    finished = sorted((r for r in own if r.summary), key=lambda r: r.created_at, reverse=True)[:4]
    if finished:
        return [r.key for r in reversed(finished)]
    return [r.key for r in sorted((r for r in runs if r.sample), key=lambda r: r.created_at)]


def labels(runs: Sequence[CompareRun]) -> dict[str, str]:
    """Short, unique display names by key: the run's name, suffixed by its id when names clash."""
    def base(r: CompareRun) -> str:
        return ("sample: " if r.sample and not r.name.startswith("sample") else "") + r.name
    names = [base(r) for r in runs]
    return {r.key: base(r) if names.count(base(r)) == 1 else f"{base(r)} ({r.run_id})" for r in runs}


def provenance(runs: Sequence[CompareRun]) -> list[str]:
    """Where and when the runs were recorded: one line per machine, runs listed with their start."""
    names = labels(runs)
    by_where: dict[str, list[str]] = {}
    for r in runs:
        when = r.created_at[:16].replace("T", " ") if r.created_at else "unknown time"
        by_where.setdefault(str(r.recorded_on or r.host or "an unknown machine"), []).append(f"{names[r.key]} ({when})")
    return [f"Recorded on {where}: {', '.join(items)}" for where, items in by_where.items()]


# ---- per-run figures -----------------------------------------------------

def _conf(run: CompareRun, key: str) -> Any:
    """A trainer option: summary.json's config first (what ran), else run.json's."""
    sc = (run.summary or {}).get("config")
    if isinstance(sc, dict) and key in sc:
        return sc[key]
    return run.config.get(key)


def _last(series: Mapping[str, Any] | None, tag: str) -> float | None:
    s = (series or {}).get(tag)
    if s is None or len(s.value) == 0:
        return None
    return float(s.value[-1])


def run_metrics(run: CompareRun, scalars: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The baseline-independent figures of one run.

    From summary.json; for a run without one (failed, stopped, still running
    or foreign) from its event series: mean ``perf/samples_per_sec`` without
    the first window, mean ``perf/epoch_time_s``, max ``mem/<dev>/peak_mib``,
    the last losses and accuracy.
    """
    s = run.summary or {}
    final = s.get("final") or {}
    peaks = {str(k): float(v) for k, v in (s.get("peak_mem_mib") or {}).items() if v is not None}
    throughput = s.get("steady_throughput_samples_per_sec") or s.get("throughput_samples_per_sec")
    epoch_time = s.get("epoch_time_s")
    sc = scalars or {}
    if not s:
        tp = sc.get("perf/samples_per_sec")
        if tp is not None and len(tp.value):
            vals = np.asarray(tp.value, dtype=float)
            throughput = float(vals[1:].mean() if len(vals) > 1 else vals[0])
        et = sc.get("perf/epoch_time_s")
        if et is not None and len(et.value):
            epoch_time = float(np.mean(et.value))
        for tag, ser in sc.items():
            parts = tag.split("/")
            if len(parts) == 3 and parts[0] == "mem" and parts[2] == "peak_mib" and len(ser.value):
                peaks[parts[1]] = float(np.max(ser.value))
    devices = list(s.get("devices") or sorted(peaks))
    global_batch = s.get("global_batch") or _conf(run, "batch_size")
    return {
        "mode": s.get("mode") or _conf(run, "mode"),
        "effective mode": s.get("effective_mode"),
        "effective mode reason": s.get("effective_mode_reason"),
        "devices": devices,
        "world size": s.get("world_size"),
        "global batch": global_batch,
        "per-device batch": s.get("per_device_batch"),
        "throughput": None if throughput is None else float(throughput),
        "epoch time": None if epoch_time is None else float(epoch_time),
        "peaks": peaks,
        "final train loss": final.get("train_loss", _last(sc, "train/loss")),
        "final val loss": final.get("val_loss", _last(sc, "val/loss")),
        "final val acc": final.get("val_acc", _last(sc, "val/acc")),
    }


def speedup(throughput: float | None, baseline_throughput: float | None) -> float | None:
    """Throughput relative to the baseline's; None when either is unknown or zero."""
    if not throughput or not baseline_throughput:
        return None
    return float(throughput) / float(baseline_throughput)


def efficiency(speedup_: float | None, devices: int, baseline_devices: int = 1) -> float | None:
    """Speedup per device added: speedup / (devices / baseline devices)."""
    if speedup_ is None or devices <= 0 or baseline_devices <= 0:
        return None
    return speedup_ / (devices / baseline_devices)


def imbalance(peaks: Mapping[str, float]) -> float | None:
    """(max - min) / mean of per-device peak memory; None with fewer than two devices."""
    vals = [float(v) for v in peaks.values() if v is not None]
    if len(vals) < 2 or np.mean(vals) <= 0:
        return None
    return (max(vals) - min(vals)) / float(np.mean(vals))


def loss_agreement(
    series: Any, baseline_series: Any, rtol: float = AGREEMENT_RTOL
) -> int | None:
    """The last common step up to which ``series`` agrees with ``baseline_series`` within ``rtol``.

    Both are scalar series (``.step``, ``.value``); only the steps both logged
    are compared. None when they share no step or already differ at the first.
    Runs of different modes with the same seed and global batch compute the
    same steps, so they agree to float rounding at first; rounding differences
    between reduction orders then grow as training goes on.
    """
    if series is None or baseline_series is None:
        return None
    steps, ia, ib = np.intersect1d(np.asarray(series.step), np.asarray(baseline_series.step),
                                   assume_unique=False, return_indices=True)
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
    """The default baseline key: a run asked and run as ``single``, else the one with fewest devices."""
    if not runs:
        return None
    def rank(r: CompareRun) -> tuple:
        m = run_metrics(r)
        asked_single = m["mode"] == "single" and m["effective mode"] in (None, "single")
        return (not asked_single, len(m["devices"]) or 99, r.created_at)
    return min(runs, key=rank).key


def compare_table(
    runs: Sequence[CompareRun],
    baseline_key: str | None = None,
    scalars: Mapping[str, Mapping[str, Any]] | None = None,
) -> pd.DataFrame:
    """One row per run with the columns listed at the top of this module.

    ``scalars`` maps a run key to its event series: the source of the figures
    of runs without a summary.json, and of the loss agreement column. The baseline defaults to ``choose_baseline``.
    """
    if not runs:
        return pd.DataFrame(columns=COLUMNS_BEFORE_DEVICES + COLUMNS_AFTER_DEVICES)
    names = labels(runs)
    baseline_key = baseline_key if baseline_key in {r.key for r in runs} else choose_baseline(runs)
    metrics = {r.key: run_metrics(r, (scalars or {}).get(r.key)) for r in runs}
    base = metrics[baseline_key]
    base_devices = len(base["devices"]) or 1
    all_devices = sorted({d for m in metrics.values() for d in m["peaks"]}, key=device_order)
    rows = []
    for r in runs:
        m = metrics[r.key]
        sp = speedup(m["throughput"], base["throughput"])
        row = {
            "run": names[r.key],
            "mode": m["mode"],
            "effective mode": m["effective mode"],
            "devices": ", ".join(m["devices"]),
            "world size": m["world size"],
            "global batch": m["global batch"],
            "per-device batch": m["per-device batch"],
            "throughput (samples/s)": m["throughput"],
            "speedup": sp,
            "efficiency": efficiency(sp, len(m["devices"]) or 1, base_devices),
            "epoch time (s)": m["epoch time"],
        }
        for d in all_devices:
            row[PEAK_PREFIX + d] = m["peaks"].get(d)
        row["memory imbalance"] = imbalance(m["peaks"])
        row["loss matches baseline to step"] = None if r.key == baseline_key else loss_agreement(
            (scalars or {}).get(r.key, {}).get("train/loss"),
            (scalars or {}).get(baseline_key, {}).get("train/loss"))
        for c in ("final train loss", "final val loss", "final val acc"):
            row[c] = None if m[c] is None else float(m[c])
        rows.append(row)
    df = pd.DataFrame(rows, columns=COLUMNS_BEFORE_DEVICES + [PEAK_PREFIX + d for d in all_devices] + COLUMNS_AFTER_DEVICES)
    # Numeric columns stay numeric (NaN for unknown) so CSV and sorting work.
    for c in df.columns:
        if c not in ("run", "mode", "effective mode", "devices"):
            df[c] = pd.to_numeric(df[c], errors="coerce")
    return df


def device_order(name: str) -> tuple:
    """Sort key for device names: ``cuda2`` before ``cuda10``."""
    head = name.rstrip("0123456789")
    tail = name[len(head):]
    return (head, int(tail) if tail else -1)


def table_csv(df: pd.DataFrame) -> bytes:
    """The table as UTF-8 CSV bytes, for a download button."""
    buf = io.StringIO()
    df.to_csv(buf, index=False)
    return buf.getvalue().encode("utf-8")


# ---- fairness --------------------------------------------------------------

def fairness_warnings(runs: Sequence[CompareRun]) -> list[FairnessWarning]:
    """What makes the chosen runs an unfair comparison, one warning per cause.

    Differences in model, dataset, global batch, seed, precision (amp) or, among
    the runs that really used several devices, device count; a run whose
    effective mode is not the asked one; a run without summary.json; runs
    recorded on different hosts.
    """
    if not runs:
        return []
    names = labels(runs)
    metrics = {r.key: run_metrics(r) for r in runs}
    out: list[FairnessWarning] = []

    def differ(key: str, what: str, values: dict[str, Any], why: str) -> None:
        if len({json.dumps(v, sort_keys=True, default=str) for v in values.values()}) > 1:
            listed = ", ".join(f"{names[k]}={v}" for k, v in values.items())
            out.append(FairnessWarning(key, f"The runs differ in {what} ({listed}): {why}"))

    differ("model", "model", {r.key: _conf(r, "model") for r in runs},
           "throughput and memory measure different work.")
    differ("dataset", "dataset", {r.key: _conf(r, "dataset") for r in runs},
           "losses and accuracies are not comparable.")
    differ("global_batch", "global batch", {k: m["global batch"] for k, m in metrics.items()},
           "steps mean different amounts of data; compare loss against samples seen.")
    differ("seed", "seed", {r.key: _conf(r, "seed") for r in runs},
           "loss curves differ by chance as well as by mode.")
    differ("amp", "precision (amp)", {r.key: bool(_conf(r, "amp")) for r in runs},
           "mixed precision changes both speed and memory.")
    parallel = {k: len(m["devices"]) for k, m in metrics.items()
                if m["effective mode"] not in (None, "single") and m["devices"]}
    differ("device_count", "device count among the multi-device runs", parallel,
           "compare scaling efficiency rather than speedup.")
    for r in runs:
        m = metrics[r.key]
        if m["effective mode"] and m["mode"] and m["effective mode"] != m["mode"]:
            reason = m["effective mode reason"] or "no reason recorded"
            out.append(FairnessWarning(
                "effective_mode",
                f"{names[r.key]} was asked to run as {m['mode']} but ran as {m['effective mode']} ({reason}).",
            ))
        if not r.summary:
            out.append(FairnessWarning(
                "no_summary",
                f"{names[r.key]} has no summary.json (state: {r.state or 'unknown'}); its figures come from its "
                "event files and may cover only part of the run.",
            ))
    differ("host", "host", {r.key: r.host for r in runs if r.host},
           "different machines make throughput incomparable.")
    return out


def run_scalars(reader: Any) -> dict[str, Any]:
    """Refresh a run folder's ``lab.events.LogdirReader`` and merge its tb/ and sys/ series."""
    reader.refresh()
    return merge_scalars({n: reader.scalars(n) for n in reader.run_names()})


def merge_scalars(by_subrun: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One tag -> series mapping from a run folder's sub-runs (``tb``, ``sys``...).

    ``lab.events.LogdirReader`` over a run folder names ``tb/`` and ``sys/``
    as separate runs; their tags never collide (``sys/`` tags are only the
    supervisor's), so the Compare page looks them up in one mapping.
    """
    out: dict[str, Any] = {}
    for name in sorted(by_subrun):
        out.update(by_subrun[name])
    return out
