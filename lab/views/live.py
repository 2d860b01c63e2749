"""What the Live page and the home page show about runs, computed without a
browser: a run's progress (step/total, ETA, throughput) from its
progress.json, summary.json and status; which run to show by default; the
runs at a glance; the device strip rows; and the chart data of a run, from
its ``tb/`` scalars (loss, accuracy, throughput against step) and its
``sys/`` scalars (per-GPU utilisation and memory over time, or the CPU and
RSS of the run's processes when it ran on CPU). Inputs are duck-typed: a
record is anything with ``lab.engine.registry.RunRecord``'s attributes, a series
anything with numpy ``step``, ``wall_time``, ``value`` (``lab.events.Series``).
"""
from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lab.runfolder import FINAL_STATES, LIVE_STATES, QUEUED, STARTING, parse_time
from lab.views.text import ChartSpec, fmt_duration, fmt_mib, fmt_rate

log = logging.getLogger(__name__)

# A running run whose progress.json has not moved for this long is probably
# stuck (a rank waiting in a collective) or between epochs doing validation.
STALE_AFTER_S = 60.0

_GPU_TAG = re.compile(r"^sys/gpu(\d+)/(util_pct|mem_used_mib|power_w|temp_c)$")


@dataclass(frozen=True)
class Progress:
    """A run's progress as the page shows it."""

    state: str
    step: int | None
    total_steps: int | None
    fraction: float | None  # 0..1 for the progress bar; None = unknown
    eta_s: float | None
    samples_per_sec: float | None
    elapsed_s: float | None
    stale_s: float | None  # seconds since progress.json last moved, when running and stale
    label: str


def is_active(state: str | None) -> bool:
    return state in LIVE_STATES


def _num(d: Mapping[str, Any] | None, key: str) -> float | None:
    if not d:
        return None
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def progress_of(record: Any, now: float | None = None) -> Progress:
    """Progress of one run from its status, progress.json and summary.json.

    ETA is the time per step so far times the steps left, less the time since
    progress.json was written; a finished run shows its final figures.
    """
    now = time.time() if now is None else now
    state = getattr(record, "state", None) or "unknown"
    prog = getattr(record, "progress", None) or {}
    summ = getattr(record, "summary", None) or {}
    step = _num(prog, "step")
    total = _num(prog, "total_steps")
    elapsed = _num(prog, "elapsed_s")
    rate = _num(prog, "samples_per_sec")
    if state in FINAL_STATES and summ:
        step = _num(summ, "steps") if _num(summ, "steps") is not None else step
        elapsed = _num(summ, "wall_time_s") or elapsed
        rate = _num(summ, "steady_throughput_samples_per_sec") or _num(summ, "throughput_samples_per_sec") or rate
        if state == "succeeded" and step is not None and not total:
            total = step
    fraction = None
    if total and total > 0 and step is not None:
        fraction = min(1.0, max(0.0, step / total))
    if state == "succeeded":
        fraction = 1.0
    eta = None
    stale = None
    updated = _num(prog, "updated_at")
    since = max(0.0, now - updated) if updated else 0.0
    if state == "running":
        if step and total and elapsed and step > 0:
            eta = max(0.0, (total - step) * elapsed / step - since)
        if updated and since > STALE_AFTER_S:
            stale = since
    label = _label(state, step, total, eta, rate, elapsed, stale)
    return Progress(
        state=state,
        step=None if step is None else int(step),
        total_steps=None if not total else int(total),
        fraction=fraction,
        eta_s=eta,
        samples_per_sec=rate,
        elapsed_s=elapsed,
        stale_s=stale,
        label=label,
    )


def _label(state, step, total, eta, rate, elapsed, stale) -> str:
    if state in (QUEUED, STARTING) and step is None:
        return "waiting for its turn" if state == "queued" else "starting (loading torch and data)"
    parts = []
    if step is not None:
        parts.append(f"step {int(step)}" + (f" / {int(total)}" if total else ""))
    if state == "running":
        parts.append(f"ETA {fmt_duration(eta)}")
    elif elapsed is not None:
        parts.append(f"took {fmt_duration(elapsed)}")
    if rate is not None:
        parts.append(fmt_rate(rate))
    if stale:
        parts.append(f"no progress for {fmt_duration(stale)}")
    return " · ".join(parts) if parts else state


def _created_key(record: Any) -> float:
    dt = parse_time(getattr(record, "created_at", None))
    return dt.timestamp() if dt else 0.0


def newest_first(records: Sequence[Any]) -> list[Any]:
    """Records sorted newest first by created_at, then run id."""
    return sorted(records, key=lambda r: (_created_key(r), getattr(r, "run_id", "")), reverse=True)


def default_run(records: Sequence[Any]) -> str | None:
    """The run the Live page opens on: the newest running one, else the newest."""
    ordered = newest_first(records)
    if not ordered:
        return None
    for state_group in (("running",), ("starting", "queued")):
        for r in ordered:
            if r.state in state_group:
                return r.run_id
    return ordered[0].run_id


def glance(records: Sequence[Any], finished: int = 5) -> tuple[list[Any], list[Any]]:
    """``(active, latest finished)`` for the home page, each newest first."""
    ordered = newest_first(records)
    return [r for r in ordered if is_active(r.state)], [r for r in ordered if not is_active(r.state)][:finished]


def run_label(record: Any, state: bool = True) -> str:
    """One line naming a run: id, name when it adds something, mode, and state.

    A picker leaves the state out: it changes under a live page while the
    picker's label would not.
    """
    name = getattr(record, "name", "") or ""
    extra = f" “{name}”" if name and name not in record.run_id else ""
    return f"{record.run_id}{extra} · {record.mode or '?'}" + (f" · {record.state}" if state else "")


def device_rows(snapshot: Any) -> list[dict[str, Any]]:
    """One row per GPU for the device strip: label, util and memory fractions, text.

    Without GPUs, one row for the CPU (total utilisation and host memory).
    """
    rows: list[dict[str, Any]] = []
    for g in getattr(snapshot, "gpus", ()) or ():
        util = g.util_pct
        total, used = g.mem_total_mib, g.mem_used_mib
        mem_frac = (used / total) if (used is not None and total) else None
        rows.append(
            {
                "label": f"GPU {g.index} · {g.name}",
                "util": None if util is None else min(1.0, max(0.0, util / 100)),
                "util_text": "util n/a" if util is None else f"util {util:.0f}%",
                "mem": None if mem_frac is None else min(1.0, max(0.0, mem_frac)),
                "mem_text": f"memory {fmt_mib(used)} / {fmt_mib(total)}",
                "extra": _gpu_extra(g),
            }
        )
    if rows:
        return rows
    cpu = getattr(snapshot, "cpu", None)
    if cpu is not None:
        util = _attr_num(cpu, "util_pct", "total_util_pct", "percent")
        used = _attr_num(cpu, "mem_used_mib", "memory_used_mib")
        total = _attr_num(cpu, "mem_total_mib", "memory_total_mib")
        cores = _attr_num(cpu, "cores", "logical_cores", "count")
        rows.append(
            {
                "label": "CPU" + (f" · {int(cores)} cores" if cores else ""),
                "util": None if util is None else min(1.0, util / 100),
                "util_text": "util n/a" if util is None else f"util {util:.0f}%",
                "mem": (used / total) if (used is not None and total) else None,
                "mem_text": f"memory {fmt_mib(used)} / {fmt_mib(total)}",
                "extra": "",
            }
        )
    return rows


def _attr_num(obj: Any, *names: str) -> float | None:
    for n in names:
        v = getattr(obj, n, None)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def _gpu_extra(g: Any) -> str:
    bits = []
    if g.temp_c is not None:
        bits.append(f"{g.temp_c:.0f} °C")
    if g.power_w is not None:
        bits.append(f"{g.power_w:.0f} W")
    procs = getattr(g, "processes", ()) or ()
    runs = sorted({p.run_id for p in procs if getattr(p, "run_id", None)})
    if runs:
        bits.append("runs: " + ", ".join(runs))
    elif procs:
        bits.append(f"{len(procs)} process(es)")
    return " · ".join(bits)


def _xy(series: Any, x: str, t0: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(series.value, dtype=float)
    if x == "step":
        return np.asarray(series.step, dtype=float), y
    wt = np.asarray(series.wall_time, dtype=float)
    return wt - (t0 if t0 is not None else (wt[0] if len(wt) else 0.0)), y


def train_charts(tb: Mapping[str, Any]) -> list[ChartSpec]:
    """Loss, accuracy and throughput against the optimizer step, from ``tb/``.

    A chart appears only when at least one of its tags has points.
    """
    groups = [
        ("Loss", "loss", ("train/loss", "val/loss"), None),
        ("Accuracy", "accuracy", ("train/acc", "val/acc"), None),
        ("Throughput", "samples/s", ("perf/samples_per_sec",), None),
    ]
    specs = []
    for title, y_title, tags, y_range in groups:
        traces = [(t, *_xy(tb[t], "step")) for t in tags if t in tb and len(tb[t].value)]
        if traces:
            specs.append(ChartSpec(title, "step", y_title, traces, y_range))
    return specs


def sys_charts(sysd: Mapping[str, Any]) -> tuple[list[ChartSpec], str | None]:
    """Device charts over time from ``sys/``, and a note when they show the CPU.

    Per-GPU utilisation (0-100 %) and memory, one trace per physical GPU; on a
    CPU run, ``sys/cpu_pct`` and ``sys/rss_mib`` of the run's process tree.
    Time is seconds since the run's first sample.
    """
    nonempty = {t: s for t, s in sysd.items() if len(s.value)}
    if not nonempty:
        return [], None
    t0 = min(float(np.asarray(s.wall_time)[0]) for s in nonempty.values())
    by_metric: dict[str, list[tuple[int, str]]] = {}
    for tag in nonempty:
        m = _GPU_TAG.match(tag)
        if m:
            by_metric.setdefault(m.group(2), []).append((int(m.group(1)), tag))
    specs: list[ChartSpec] = []
    if by_metric:
        layout = [
            ("util_pct", "GPU utilisation", "%", (0.0, 100.0)),
            ("mem_used_mib", "GPU memory used", "MiB", None),
            ("power_w", "GPU power", "W", None),
        ]
        for metric, title, unit, y_range in layout:
            tags = sorted(by_metric.get(metric, []))
            if tags:
                traces = [(f"gpu{i}", *_xy(nonempty[t], "time", t0)) for i, t in tags]
                specs.append(ChartSpec(title, "time (s)", unit, traces, y_range))
        return specs, None
    if "sys/cpu_pct" in nonempty:
        specs.append(ChartSpec("CPU use of the run's processes", "time (s)", "% of one core",
                               [("cpu", *_xy(nonempty["sys/cpu_pct"], "time", t0))]))
    if "sys/rss_mib" in nonempty:
        specs.append(ChartSpec("Memory (RSS) of the run's processes", "time (s)", "MiB",
                               [("rss", *_xy(nonempty["sys/rss_mib"], "time", t0))]))
    note = "No GPU samples: this run used the CPU, so these charts show its processes' CPU and memory." if specs else None
    return specs, note


def split_run_scalars(scalars_by_run: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a run folder's reader output into its ``tb`` and ``sys`` scalars.

    A ``LogdirReader`` over a run folder names its sub-runs ``tb`` and ``sys``;
    anything else (a trainer run by hand writing straight into the folder)
    counts as training scalars.
    """
    tb: dict[str, Any] = {}
    sysd: dict[str, Any] = {}
    for name, tags in scalars_by_run.items():
        first = name.replace("\\", "/").split("/")[0]
        target = sysd if first == "sys" else tb
        for tag, series in tags.items():
            # sys tags can only come from the supervisor's sampler.
            (sysd if tag.startswith("sys/") else target)[tag] = series
    return tb, sysd


def failure_box(record: Any) -> dict[str, Any] | None:
    """The diagnosis of a failed/lost run as the page shows it, or None.

    Always has ``cause`` and ``fix``; ``rank`` and ``excerpt`` when known.
    """
    if record.state not in ("failed", "lost"):
        return None
    d = dict(getattr(record, "diagnosis", None) or {})
    if record.state == "lost" and not d:
        d = {
            "cause": "The run's supervisor is gone (the machine restarted or it was killed), so its state is unknown.",
            "fix": "Look at the log below; launch it again, with --resume auto to continue from its last checkpoint.",
        }
    if not d.get("cause"):
        code = getattr(record, "exit_code", None)
        d["cause"] = f"The training command exited with code {code}." if code is not None else "The run failed."
    d.setdefault("fix", "Read the last lines of the log below for the error.")
    return d


def fallback_note(record: Any) -> str | None:
    """One line when a run ran in another mode than asked (e.g. DP on one device), else None.

    The silent fall back to one device is a trap the seeds warn about; the
    trainer records it in summary.json (``effective_mode``, ``effective_mode_reason``).
    """
    summ = getattr(record, "summary", None) or {}
    asked = summ.get("mode") or getattr(record, "mode", None)
    ran = summ.get("effective_mode")
    if not ran or not asked or ran == asked:
        return None
    why = summ.get("effective_mode_reason")
    return f"Asked for {asked}, ran as {ran}" + (f": {why}." if why else ".")


def config_lines(record: Any) -> list[str]:
    """What the run was asked to do, as short ``name: value`` lines (non-default extras included)."""
    cfg = dict(getattr(record, "config", None) or {})
    keys = ("mode", "gpus", "nproc", "nnodes", "model", "dataset", "batch_size", "epochs", "max_steps",
            "lr", "amp", "seed", "workers", "image_size")
    out = [f"{k}: {cfg[k]}" for k in keys if k in cfg]
    if cfg.get("extra_env"):
        out.append("extra_env: " + ", ".join(f"{k}={v}" for k, v in sorted(cfg["extra_env"].items())))
    return out
