"""A run's progress as the pages show it: step of total, ETA, throughput, elapsed time, staleness.

Computed from the run's status, its ``progress.json`` (while it trains) and
its ``summary.json`` (once it has ended); the Live page's header and the
home page's runs at a glance show it. A user's script writes neither: its
progress is read from the scalars of its linked event files when the page
has them (``scalars=``): the last step seen, steps/s over the last points,
the time its events span, and an ETA only when the user gave a total
(``total_steps``). A record is anything with
``lab.engine.registry.RunRecord``'s attributes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lab import tags
from lab.runfolder import FINAL_STATES, QUEUED, RUNNING, SCRIPT, STARTING, SUCCEEDED
from lab.views.text import fmt_duration, fmt_rate

# A running run whose progress.json has not moved for this long is probably
# stuck (a rank waiting in a collective) or between epochs doing validation.
STALE_AFTER_S = 60.0
RATE_POINTS = 20  # a script's steps/s: over its last this many logged points


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
    # a user's script: from its events (it has no samples/s of ours)
    steps_per_sec: float | None = None


def _num(d: Mapping[str, Any] | None, key: str) -> float | None:
    if not d:
        return None
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def progress_of(
    record: Any, now: float | None = None, scalars: Mapping[str, Any] | None = None
) -> Progress:
    """Progress of one run from its status, progress.json and summary.json (a script's:
    ``scalars``).

    ETA is the time per step so far times the steps left, less the time since
    progress.json was written; a finished run shows its final figures.
    """
    now = time.time() if now is None else now
    state = getattr(record, "state", None) or "unknown"
    if getattr(record, "kind", None) == SCRIPT:
        return _script_progress(record, state, now, scalars or {})
    prog = getattr(record, "progress", None) or {}
    summ = getattr(record, "summary", None) or {}
    step = _num(prog, "step")
    total = _num(prog, "total_steps")
    elapsed = _num(prog, "elapsed_s")
    rate = _num(prog, "samples_per_sec")
    if state in FINAL_STATES and summ:
        step = _num(summ, "steps") if _num(summ, "steps") is not None else step
        elapsed = _num(summ, "wall_time_s") or elapsed
        rate = (
            _num(summ, "steady_throughput_samples_per_sec")
            or _num(summ, "throughput_samples_per_sec")
            or rate
        )
        if state == SUCCEEDED and step is not None and not total:
            total = step
    fraction = None
    if total and total > 0 and step is not None:
        fraction = min(1.0, max(0.0, step / total))
    if state == SUCCEEDED:
        fraction = 1.0
    eta = None
    stale = None
    updated = _num(prog, "updated_at")
    since = max(0.0, now - updated) if updated else 0.0
    if state == RUNNING:
        if step and total and elapsed and step > 0:
            eta = max(0.0, (total - step) * elapsed / step - since)
        if updated and since > STALE_AFTER_S:
            stale = since
    return Progress(
        state=state,
        step=None if step is None else int(step),
        total_steps=None if not total else int(total),
        fraction=fraction,
        eta_s=eta,
        samples_per_sec=rate,
        elapsed_s=elapsed,
        stale_s=stale,
        label=_label(state, step, total, eta, rate, elapsed, stale),
    )


def _label(state, step, total, eta, rate, elapsed, stale) -> str:
    if state in (QUEUED, STARTING) and step is None:
        return "waiting for its turn" if state == QUEUED else "starting (loading torch and data)"
    parts = []
    if step is not None:
        parts.append(f"step {int(step)}" + (f" / {int(total)}" if total else ""))
    if state == RUNNING:
        parts.append(f"ETA {fmt_duration(eta)}")
    elif elapsed is not None:
        parts.append(f"took {fmt_duration(elapsed)}")
    if rate is not None:
        parts.append(fmt_rate(rate))
    if stale:
        parts.append(f"no progress for {fmt_duration(stale)}")
    return " · ".join(parts) if parts else state


def _last_steps(
    scalars: Mapping[str, Any],
) -> tuple[int | None, float | None, float | None, float | None]:
    """``(last step, steps/s, wall time of that step, seconds the events span)`` of a script's
    scalars."""
    best, first, last = None, None, None
    for tag, s in scalars.items():
        if not len(s.step):
            continue
        first = min(first, float(s.wall_time[0])) if first is not None else float(s.wall_time[0])
        last = max(last, float(s.wall_time[-1])) if last is not None else float(s.wall_time[-1])
        if not tag.startswith(tags.SYS) and (best is None or s.step[-1] > best.step[-1]):
            best = s  # the device samples count steps of their own
    span = None if first is None else last - first
    if best is None:
        return None, None, None, span
    n = min(len(best.step), RATE_POINTS)
    d_step, d_wall = (
        float(best.step[-1] - best.step[-n]),
        float(best.wall_time[-1] - best.wall_time[-n]),
    )
    rate = d_step / d_wall if n >= 2 and d_wall > 0 and d_step > 0 else None
    return int(best.step[-1]), rate, float(best.wall_time[-1]), span


def _script_progress(record: Any, state: str, now: float, scalars: Mapping[str, Any]) -> Progress:
    step, rate, at, span = _last_steps(scalars)
    total = _num(getattr(record, "config", None), "total_steps") or None
    fraction = (
        1.0
        if state == SUCCEEDED
        else (min(1.0, step / total) if total and step is not None else None)
    )
    eta = stale = None
    if state == RUNNING and at is not None:
        since = max(0.0, now - at)
        if total and rate and step is not None:
            eta = max(0.0, (total - step) / rate - since)
        if since > STALE_AFTER_S:
            stale = since
    parts = [] if step is None else [f"step {step}" + (f" / {int(total)}" if total else "")]
    if state == RUNNING and total:
        parts.append(f"ETA {fmt_duration(eta)}")
    elif state != RUNNING and span is not None:
        parts.append(f"took {fmt_duration(span)}")
    if rate is not None:
        parts.append(f"{rate:.3g} steps/s")
    if stale:
        parts.append(f"no new step for {fmt_duration(stale)}")
    label = " · ".join(parts) or ("starting" if state in (QUEUED, STARTING) else state)
    return Progress(
        state, step, int(total) if total else None, fraction, eta, None, span, stale, label, rate
    )
