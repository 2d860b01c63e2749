"""Figures of a run without summary.json (a user's script, foreign logs, a trainer run that did not
finish): what the lab can honestly derive from its event series and the supervisor's records, the
choices of throughput and loss tag offered for it, and the text that says how to read them
(``HOW_TO_READ``). Scalars are mappings of tag -> series (``.step``, ``.wall_time``, ``.value``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lab import tags
from lab.engine.spec.run import RunConfig
from lab.runfolder import SCRIPT, TRAINER, parse_time
from lab.views.compare.runs import CompareRun
from lab.views.compare.spread import Spread, median_spread, steady_windows
from lab.views.runscalars import SYS_PREFIX

MEASURED, DERIVED = "measured", "derived"
THROUGHPUT_PATTERN = re.compile(r"samples_per_sec|throughput|img/s|it/s", re.IGNORECASE)
SAMPLES = "samples/s"
# the throughput choice "steps/s of the loss tag" (no tag has this name)
STEP_RATE = "step-rate"
DEFAULT_LOSS = tags.TRAIN_LOSS
MIN_WINDOWS = 2  # fewer rates than this: a point figure, no interval
PEAKS_ALLOCATOR, PEAKS_NVML = "allocator", "nvml"
_PEAK_TAG = re.compile(r"^mem/([^/]+)/peak_mib$")
_NVML_MEM = re.compile(r"^sys/gpu(\d+)/mem_used_mib$")
_NVML_UTIL = re.compile(r"^sys/gpu(\d+)/util_pct$")

HOW_TO_READ = """\
**Derived figures.** A run without the trainer's summary.json (a user's
script, foreign logs with the supervisor's sys/ beside them, a run that did
not finish) is marked *derived*: its throughput is the tag you pick (tags
named like samples_per_sec, throughput, img/s or it/s are offered first), or
none, and then its speedup is of **steps/s**: the step rate of its loss tag
against the baseline's. A steps/s speedup is a samples/s speedup only if each
step trains the same global batch, which the lab cannot see in a script;
efficiency then assumes it does (strong scaling). Peak memory is NVML's used
memory of each GPU (columns gpu<i>, physical index), wall time the
supervisor's start to end, utilisation the sys/ samples, as for any run."""


def figures(run: CompareRun) -> str:
    """``measured`` for a run with the trainer's summary.json, ``derived`` for any other."""
    return MEASURED if run.summary else DERIVED


def sees_config(run: CompareRun) -> bool:
    """Whether the lab knows the run's model, data, batch, seed and precision: only its trainer's
    runs."""
    return run.kind == TRAINER


def _tags(scalars_by_key: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return sorted(
        {
            t
            for sc in scalars_by_key.values()
            for t, s in (sc or {}).items()
            if not t.startswith(SYS_PREFIX) and len(s.value)
        }
    )


def throughput_options(scalars_by_key: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What the user may pick as the throughput of runs without summary.json, the first being the
    default.

    Tags matching ``THROUGHPUT_PATTERN``, then ``STEP_RATE`` (steps/s of the
    loss tag), then every other tag.
    """
    tags = _tags(scalars_by_key)
    first = [t for t in tags if THROUGHPUT_PATTERN.search(t)]
    return first + [STEP_RATE] + [t for t in tags if t not in first]


def default_throughput(
    runs: Sequence[CompareRun], scalars: Mapping[str, Mapping[str, Any]]
) -> str | None:
    """The throughput choice offered first for the runs without summary.json; None when every run
    has one."""
    missing = {r.key: scalars.get(r.key) or {} for r in runs if not r.summary}
    return throughput_options(missing)[0] if missing else None


def option_label(option: str) -> str:
    """How a throughput choice reads on the page."""
    return "steps/s of the loss tag" if option == STEP_RATE else option


def loss_options(scalars_by_key: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The tags offered for the step rate: ``train/loss`` first where logged, then other loss tags,
    then the rest."""
    tags = _tags(scalars_by_key)
    losses = sorted(
        (t for t in tags if "loss" in t.lower()),
        key=lambda t: (t != DEFAULT_LOSS, "train" not in t, t),
    )
    return losses + [t for t in tags if t not in losses]


def loss_tag_of(scalars: Mapping[str, Any] | None, chosen: str | None = None) -> str | None:
    """The tag whose step rate is the run's steps/s: ``chosen`` if the run logs it, else its own
    first loss tag."""
    sc = scalars or {}
    if chosen and chosen in sc and len(sc[chosen].value):
        return chosen
    options = loss_options({"run": sc})
    return next((t for t in options if "loss" in t.lower()), None)


def step_rate(series: Any) -> tuple[float | None, Spread | None]:
    """``(steps/s, its spread or None)`` from the wall times of a series' logged steps."""
    if series is None or len(series.step) < 2:
        return None, None
    order = np.argsort(np.asarray(series.step, dtype=float), kind="stable")
    steps = np.asarray(series.step, dtype=float)[order]
    wall = np.asarray(series.wall_time, dtype=float)[order]
    ds, dt = np.diff(steps), np.diff(wall)
    ok = (ds > 0) & (dt > 0)  # a step logged twice, or two points in one clock tick, is not a rate
    whole = (
        (steps[-1] - steps[0]) / (wall[-1] - wall[0])
        if wall[-1] > wall[0] and steps[-1] > steps[0]
        else None
    )
    rates = steady_windows(steps[1:][ok], (ds[ok] / dt[ok]))
    spread = median_spread(rates) if len(rates) >= MIN_WINDOWS else None
    return (spread.median if spread else whole), spread


def tag_rate(series: Any) -> tuple[float | None, Spread | None]:
    """``(median, spread or None)`` of a throughput tag's steady windows, as the trainer's windows
    are read."""
    if series is None or not len(series.value):
        return None, None
    windows = steady_windows(series.step, series.value)
    spread = median_spread(windows)
    if spread is None:
        return None, None
    return spread.median, (spread if spread.windows >= MIN_WINDOWS else None)


def _sys_span(scalars: Mapping[str, Any]) -> float | None:
    times = [
        float(t)
        for tag, s in scalars.items()
        if tag.startswith(SYS_PREFIX) and len(s.wall_time)
        for t in (s.wall_time[0], s.wall_time[-1])
    ]
    return max(times) - min(times) if len(times) >= 2 and max(times) > min(times) else None


def wall_time(run: CompareRun, scalars: Mapping[str, Any] | None = None) -> float | None:
    """Seconds the run took, start-up included: the supervisor's start to end, the same for every
    kind of run; else (a trainer run by hand) summary.json's ``wall_time_s``; else (foreign logs)
    its sys/ samples' span."""
    start, end = parse_time(run.started_at), parse_time(run.ended_at)
    if start and end and end > start:
        return (end - start).total_seconds()
    s = run.summary or {}
    if isinstance(s.get("wall_time_s"), (int, float)):
        return float(s["wall_time_s"])
    return _sys_span(scalars or {})


def nvml_peaks(scalars: Mapping[str, Any]) -> dict[str, float]:
    """``{gpu<i>: max MiB}`` of NVML's used-memory samples (physical index)."""
    out = {}
    for tag, s in scalars.items():
        m = _NVML_MEM.match(tag)
        vals = np.asarray(s.value, dtype=float) if m else np.array([])
        vals = vals[np.isfinite(vals)]
        if len(vals):
            out[f"gpu{m.group(1)}"] = float(vals.max())
    return out


def allocator_peaks(scalars: Mapping[str, Any]) -> dict[str, float]:
    """``{device: max MiB}`` of the trainer's ``mem/<device>/peak_mib`` events."""
    return {
        m.group(1): float(np.max(s.value))
        for t, s in scalars.items()
        if (m := _PEAK_TAG.match(t)) and len(s.value)
    }


def rate_tag(throughput_tag: str | None, scalars: Mapping[str, Any]) -> str | None:
    """The tag a run's throughput is read from: the user's pick where the run logs it
    (``STEP_RATE``: none, steps/s only), else the trainer's samples/s
    (``tags.SAMPLES_PER_SEC``) where logged."""
    if throughput_tag == STEP_RATE:
        return None
    if throughput_tag in scalars:
        return throughput_tag
    return tags.SAMPLES_PER_SEC if tags.SAMPLES_PER_SEC in scalars else None


def seen_devices(run: CompareRun, scalars: Mapping[str, Any]) -> tuple[list[str], int | None]:
    """``(devices, world size)`` the lab can see: a script's as given, foreign logs' GPUs
    sampled."""
    if run.kind == SCRIPT:
        c = RunConfig.from_dict(run.config)
        gpus = [f"gpu{g}" for g in c.gpus]
        return (gpus or [f"cpu{i}" for i in range(c.world_size)]), c.world_size
    gpus = sorted(
        {
            f"gpu{m.group(1)}"
            for t in scalars
            if (m := _NVML_UTIL.match(t)) and len(scalars[t].value)
        },
        key=lambda g: int(g[3:]),
    )
    return gpus, None
