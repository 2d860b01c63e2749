"""What the Logs page does with any folder of TensorBoard event files, without
a browser: resolve the folder a user picked or typed (with one clear line
when it does not exist or holds no event files), choose the tags a regex
selects (a bad regex is a message, not an exception), put scalars on an x
axis (step, relative time or wall time), smooth them with TensorBoard's
debiased EMA, and the CSV of the selected scalars. Event files themselves
are read by ``lab.events``; the runs of a folder are ``lab.views.logs.folder``,
choosing them ``lab.views.logs.run_select``, the charts ``lab.views.logs.scalar_chart``.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lab import tags

X_AXES = ("step", "relative", "wall")
X_TITLES = {"step": "step", "relative": "relative time (s)", "wall": "wall time"}
CSV_COLUMNS = ["run", "tag", "step", "wall_time", "value"]


@dataclass(frozen=True)
class Resolved:
    """A folder the user asked for: the resolved path, and an error line or None."""

    text: str
    path: Path | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None


def resolve_logdir(text: str, base: Path | None = None, has_events=None) -> Resolved:
    """Resolve a typed folder (``~`` expanded, relative to ``base``) and check it.

    ``has_events(path) -> bool`` tells whether event files lie below (defaults
    to ``lab.events.discover``); injected so the check stays in the reader.
    """
    raw = (text or "").strip().strip('"').strip("'")
    if not raw:
        return Resolved(text, None, "Type the path of a folder that holds TensorBoard event files.")
    p = Path(raw).expanduser()
    if not p.is_absolute():
        p = (base or Path.cwd()) / p
    try:
        p = p.resolve()
    except (OSError, RuntimeError) as e:
        return Resolved(text, None, f"Cannot resolve {raw!r}: {e}. Check the path.")
    if not p.exists():
        return Resolved(
            text, p, f"{p} does not exist. Check the path, or pick one of the folders above."
        )
    if not p.is_dir():
        return Resolved(
            text, p, f"{p} is a file, not a folder: give the folder that holds the event files."
        )
    if has_events is None:
        from lab.events import discover

        def has_events(path: Path) -> bool:
            return bool(discover(path))

    try:
        found = has_events(p)
    except OSError as e:
        return Resolved(text, p, f"Cannot read {p}: {e}.")
    if not found:
        return Resolved(
            text,
            p,
            f"No TensorBoard event files (events.out.tfevents.*) under {p}. Point at the folder "
            "your writer logged to.",
        )
    return Resolved(text, p, None)


def filter_tags(tags: Iterable[str], pattern: str) -> tuple[list[str], str | None]:
    """Tags whose name the regex ``pattern`` matches anywhere (``re.search``).

    An empty pattern selects all. A bad regex returns ``([], message)`` with
    the position of the problem.
    """
    tags = order_tags(tags)
    pat = (pattern or "").strip()
    if not pat:
        return tags, None
    try:
        rx = re.compile(pat)
    except re.error as e:
        where = f" at position {e.pos}" if e.pos is not None else ""
        return (
            [],
            f"The tag filter {pat!r} is not a valid regular expression ({e.msg}{where}): fix it "
            "or clear it.",
        )
    return [t for t in tags if rx.search(t)], None


# Tags a user looks at first come first; the rest follow alphabetically.
_TAG_PRIORITY = (
    tags.TRAIN_LOSS,
    tags.VAL_LOSS,
    tags.TRAIN_ACC,
    tags.VAL_ACC,
    tags.TRAIN,
    tags.VAL,
    tags.PERF,
    tags.SYS,
    tags.MEM,
)


def order_tags(tags: Iterable[str]) -> list[str]:
    """Tags sorted with loss/accuracy first, then train/, val/, perf/, sys/, mem/, then the rest."""

    def key(t: str) -> tuple[int, str]:
        for i, p in enumerate(_TAG_PRIORITY):
            if t == p or (p.endswith("/") and t.startswith(p)):
                return i, t
        return len(_TAG_PRIORITY), t

    return sorted(set(tags), key=key)


def all_tags(scalars_by_run: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return order_tags(t for tags in scalars_by_run.values() for t in tags)


def x_values(series: Any, axis: str) -> np.ndarray:
    """The x of a series: its steps, seconds since its first point, or wall time in epoch ms.

    Relative time is per run, from the run's first point of this tag, as
    TensorBoard's "relative" axis does. Wall time is in milliseconds since the
    epoch, which plotly draws as dates.
    """
    if axis == "step":
        return np.asarray(series.step, dtype=float)
    wt = np.asarray(series.wall_time, dtype=float)
    if axis == "relative":
        return wt - wt[0] if len(wt) else wt
    if axis == "wall":
        return wt * 1000.0
    raise ValueError(f"unknown x axis {axis!r}: use one of {', '.join(X_AXES)}")


def smooth(values: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's debiased EMA (``lab.views.smoothing.ema_debiased``); weight 0 = raw."""
    v = np.asarray(values, dtype=float)
    if weight <= 0 or len(v) == 0:
        return v
    from lab.views.smoothing import ema_debiased

    return np.asarray(ema_debiased(v, weight), dtype=float)


def scalars_csv(
    scalars_by_run: Mapping[str, Mapping[str, Any]],
    runs: Sequence[str],
    tags: Sequence[str],
    weight: float = 0.0,
) -> bytes:
    """The selected scalars as CSV: ``run, tag, step, wall_time, value`` (+ ``smoothed``).

    Every point, not the downsampled chart; values as read from the files.
    """
    import pandas as pd

    frames = []
    for run in runs:
        for tag in tags:
            s = scalars_by_run.get(run, {}).get(tag)
            if s is None or not len(s.value):
                continue
            f = pd.DataFrame(
                {
                    "run": run,
                    "tag": tag,
                    "step": np.asarray(s.step, dtype=np.int64),
                    "wall_time": np.asarray(s.wall_time, dtype=float),
                    "value": np.asarray(s.value, dtype=float),
                }
            )
            if weight > 0:
                f["smoothed"] = smooth(s.value, weight)
            frames.append(f)
    cols = CSV_COLUMNS + (["smoothed"] if weight > 0 else [])
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)
    buf = io.StringIO()
    df.to_csv(buf, index=False, float_format="%.9g")
    return buf.getvalue().encode()


def folder_choices(runs_dir: Path, sample_runs: Path) -> dict[str, Path]:
    """The folders the page offers before a typed path: ours, then the samples."""
    out: dict[str, Path] = {}
    if runs_dir.is_dir() and any(runs_dir.iterdir()):
        out[f"your runs ({runs_dir})"] = runs_dir
    if sample_runs.is_dir():
        out[f"sample runs ({sample_runs})"] = sample_runs
    return out
