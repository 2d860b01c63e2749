"""What the Live page shows of a user's script run besides what every run has.

A script's curves live in the folders linked to its run (``events_dirs``:
found below its working directory, given with ``--events-dir``, or its
``<run>/tb``). ``outside_dirs`` are those the run folder's own reader does
not already cover; the page reads each with the shared incremental reader
and merges them (``lab.views.runscalars.merge_parts``). ``curve_charts``
draws the trainer's charts for the tags a script shares with it (loss,
accuracy, throughput) and one chart for each other tag, since a script names
its tags as it likes. ``waiting_note`` is what the page says while there is
nothing to draw ("no event files yet below <dir>"), and ``config_lines``
what the script was asked to do. A record is anything with
``lab.engine.registry.RunRecord``'s attributes.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from typing import Any

import numpy as np

from lab.runfolder import SCRIPT, TB_DIR
from lab.views.live.run_charts import train_charts
from lab.views.runscalars import SYS_PREFIX
from lab.views.text import ChartSpec

MAX_OTHER_CHARTS = 12  # a script may log hundreds of tags; the Logs page shows them all
CONFIG_KEYS = (
    "script",
    "args",
    "cwd",
    "mode",
    "gpus",
    "nproc",
    "nnodes",
    "events_dir",
    "total_steps",
)


def is_script(record: Any) -> bool:
    return getattr(record, "kind", None) == SCRIPT


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.abspath(path), os.path.abspath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def outside_dirs(record: Any) -> list[str]:
    """The run's linked folders of event files that lie outside its run folder (read on their
    own)."""
    run_dir = str(getattr(record, "run_dir", "") or "")
    return [
        d
        for d in getattr(record, "events_dirs", None) or []
        if not run_dir or not _inside(d, run_dir)
    ]


def curve_charts(train: Mapping[str, Any]) -> list[ChartSpec]:
    """The trainer's charts for the tags it knows, then one chart per other tag
    (``MAX_OTHER_CHARTS`` at most)."""
    specs = train_charts(train)
    drawn = {name for spec in specs for name, _x, _y in spec.traces}
    others = [
        t
        for t in sorted(train)
        if t not in drawn and not t.startswith(SYS_PREFIX) and len(train[t].value)
    ]
    for tag in others[:MAX_OTHER_CHARTS]:
        s = train[tag]
        specs.append(
            ChartSpec(
                tag,
                "step",
                tag.rpartition("/")[2] or tag,
                [(tag, np.asarray(s.step, dtype=float), np.asarray(s.value, dtype=float))],
            )
        )
    return specs


def waiting_note(record: Any, train: Mapping[str, Any]) -> str | None:
    """What to say while a script run has no curves to draw; None once it has."""
    if any(len(s.value) for t, s in train.items() if not t.startswith(SYS_PREFIX)):
        return None
    cfg = getattr(record, "config", None) or {}
    where = cfg.get("cwd") or "its working directory"
    linked = getattr(record, "events_dirs", None) or []
    if linked:
        return f"Linked {', '.join(linked)}: no scalars there yet."
    tb = os.path.join(str(getattr(record, "run_dir", "") or "<run>"), TB_DIR)
    return (
        f"No event files yet below {where}. They are found there when the script writes "
        "TensorBoard events "
        f"(SummaryWriter() writes ./runs/<date>_<host>), or in {tb} (TENSORBOARD_LOGDIR); give "
        "another "
        "folder with --events-dir. Devices, logs and state are shown meanwhile."
    )


def config_lines(record: Any) -> list[str]:
    """What the script run was asked to do, as short ``name: value`` lines."""
    cfg = dict(getattr(record, "config", None) or {})
    out = []
    for k in CONFIG_KEYS:
        if k in cfg and cfg[k] not in ("", None):
            out.append(f"{k}: {shlex.join(cfg[k]) if k == 'args' else cfg[k]}")
    if cfg.get("extra_env"):
        out.append(
            "extra_env: " + ", ".join(f"{k}={v}" for k, v in sorted(cfg["extra_env"].items()))
        )
    linked = getattr(record, "events_dirs", None) or []
    if linked:
        out.append("events_dirs: " + ", ".join(linked))
    return out
