"""The Logs page's hyperparameters table: one row per run, its hyperparameters and final metrics.

Owns TensorBoard's HParams table view, computed without a browser: rows come
from the hparams sessions ``lab.events.hparams`` reads (``add_hparams`` of
torch and tensorboardX, Keras' ``hp.hparams``) and, for the lab's own run
folders, the config in ``run.json`` (read with ``lab.runrecords.read_run``).
A row stands for the runs choosing it selects: the run holding the session,
the run it describes (``add_hparams`` writes into a child folder of the
writer's run, which ``fold_sessions`` folds into that run as ``tb/`` and
``sys/`` are) and the runs below it (Keras' ``train``/``validation``).
Metrics are the last value of each tag the experiments declare plus the
lab's loss and accuracy tags. ``hp_table`` lays the rows out (optionally
only the hyperparameters that differ), ``filter_table`` applies a typed
condition such as ``lr<0.01, opt=adam``.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lab import tags
from lab.runrecords import read_run
from lab.views.runscalars import PARTS

if TYPE_CHECKING:  # pandas is imported where a table is built, not when the page imports this
    import pandas as pd

DEFAULT_METRICS = (tags.TRAIN_LOSS, tags.VAL_LOSS, tags.TRAIN_ACC, tags.VAL_ACC)
RUN_COLUMN = "run"
FROM_EVENTS, FROM_RUN_JSON = "event files", "run.json"


@dataclass(frozen=True)
class HpRow:
    """One row: the run shown, the runs choosing it selects, its hyperparameters and final
    metrics."""

    run: str
    runs: tuple[str, ...]
    hparams: dict[str, Any]
    metrics: dict[str, float | None] = field(default_factory=dict)
    source: str = FROM_EVENTS


def _parent(run: str) -> str:
    head, _, _ = run.rpartition("/")
    return head or "."


def fold_sessions(
    groups: Mapping[str, Sequence[str]],
    session_runs: Iterable[str],
    has_scalars: Callable[[str], bool] = lambda run: True,
) -> dict[str, list[str]]:
    """Displayed run -> reader runs, with each session folder ``add_hparams`` wrote folded into its
    writer's run.

    ``SummaryWriter(d).add_hparams`` writes its session into ``d/<time>``: shown
    apart, it would double the runs. A session folder is folded when its parent
    is a run with scalars of its own (Keras keeps only the experiment's config
    there) and no run lies below it (Keras' ``train``/``validation``).
    """
    out = {d: list(parts) for d, parts in groups.items()}
    display = {p: d for d, parts in out.items() for p in parts}
    for s in sorted(session_runs):
        parent = _parent(s)
        if s == "." or parent not in display or out.get(s) != [s] or not has_scalars(parent):
            continue  # no parent run, or the session folder already belongs to another run
        if any(p.startswith(s + "/") for p in display):
            continue
        out[display[parent]].append(s)
        del out[s]
    return out


def display_of(groups: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """Reader run -> the displayed run it belongs to."""
    return {p: d for d, parts in groups.items() for p in parts}


def config_hparams(config: Mapping[str, Any]) -> dict[str, Any]:
    """A run.json config as table cells: plain values as they are, lists and dicts as text, empty
    ones left out."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, (list, tuple)):
            if value:
                out[key] = ",".join(str(v) for v in value)
        elif isinstance(value, dict):
            if value:
                out[key] = ", ".join(f"{k}={v}" for k, v in sorted(value.items()))
        elif value is not None:
            out[key] = value
    return out


def lab_config(run_dir: Path) -> dict[str, Any] | None:
    """The hyperparameters of a lab run folder (its run.json config); None when it has none."""
    config = read_run(run_dir, kept=True).config
    return config_hparams(config) if config is not None else None


def last_value(series: Any) -> float | None:
    """The value at a series' last point; None for an empty or missing one."""
    if series is None or not len(series.value):
        return None
    return float(series.value[-1])


def _session_rows(groups, sessions: Mapping[str, Any]) -> dict[str, HpRow]:
    display = display_of(groups)
    rows: dict[str, HpRow] = {}
    for s, session in sorted(sessions.items()):
        d = display.get(s)
        if d is None:
            continue  # the reader has not seen that folder yet
        below = [
            o for o, parts in groups.items() if any(p.startswith(s + "/") for p in parts) and o != d
        ]
        old = rows.get(d)
        hparams = {**(old.hparams if old else {}), **session.hparams}
        runs = tuple(dict.fromkeys([d, *(old.runs if old else ()), *below]))
        rows[d] = HpRow(d, runs, hparams, {}, FROM_EVENTS)
    return rows


def _is_lab_run(parts: Sequence[str]) -> bool:
    return any(p.rpartition("/")[2] in PARTS for p in parts)


def hp_rows(
    root: Path,
    groups: Mapping[str, Sequence[str]],
    sessions: Mapping[str, Any],
    metrics: Sequence[Any],
    scalars_of: Callable[[str], Mapping[str, Any]],
) -> list[HpRow]:
    """Rows for the runs with hyperparameters, sorted by run; ``metrics``: the experiments'
    ``Metric``s."""
    rows = _session_rows(groups, sessions)
    for d, parts in groups.items():
        if d not in rows and _is_lab_run(parts):
            config = lab_config(Path(root) / d)
            if config is not None:
                rows[d] = HpRow(d, (d,), config, {}, FROM_RUN_JSON)
    display = display_of(groups)
    out = []
    for d, row in sorted(rows.items()):
        values: dict[str, float | None] = {}
        session = next((s for s in sorted(sessions) if display.get(s) == d), None)
        for m in metrics if session is not None else ():
            where = display.get(
                session
                if not m.group
                else (f"{m.group}" if session == "." else f"{session}/{m.group}")
            )
            values[m.label] = last_value(scalars_of(where).get(m.tag)) if where else None
        own = scalars_of(d)
        for tag in DEFAULT_METRICS:
            if tag in own and tag not in values:
                values[tag] = last_value(own[tag])
        out.append(HpRow(row.run, row.runs, row.hparams, values, row.source))
    return out


@functools.cache
def lab_defaults() -> dict[str, Any]:
    """The lab trainer's option defaults, as ``config_hparams`` writes them: what a run.json that
    lacks a key (recorded before the option existed) ran with."""
    from lab.engine.spec.run import trainer_fields

    plain = {f.name: f.default for f in trainer_fields() if f.default is not dataclasses.MISSING}
    return config_hparams(plain)


def _blank(value: Any) -> bool:
    if value is None or (isinstance(value, str) and not value.strip()):
        return True
    return isinstance(value, float) and value != value  # NaN


def cell(row: HpRow, name: str, defaults: Mapping[str, Any]) -> Any:
    """What ``row`` holds for ``name``: a lab run missing the key holds the trainer's default;
    empty text and NaN are no value (None)."""
    value = row.hparams.get(name)
    if _blank(value) and row.source == FROM_RUN_JSON:
        value = defaults.get(name)
    return None if _blank(value) else value


def hp_table(
    rows: Sequence[HpRow],
    order: Sequence[str] = (),
    varying_only: bool = False,
    defaults: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """The rows as a DataFrame: ``run``, hyperparameters (``order`` first), then metrics.

    A lab run's missing key shows the trainer's default (``defaults``, ``lab_defaults()`` unless
    given): a key missing and a key at its default are one value. ``varying_only`` drops
    hyperparameters equal in every row (when there are two rows or more), and columns with no
    value in any row.
    """
    import pandas as pd

    defaults = lab_defaults() if defaults is None else defaults
    names = list(
        dict.fromkeys([*order, *sorted({k for r in rows for k in r.hparams} - set(order))])
    )
    names = [n for n in names if any(n in r.hparams for r in rows)]
    cells = {n: [cell(r, n, defaults) for r in rows] for n in names}
    if varying_only:
        names = [n for n in names if any(v is not None for v in cells[n])]
    if varying_only and len(rows) > 1:
        names = [n for n in names if len({_same(v) for v in cells[n]}) > 1]
    labels = list(dict.fromkeys(k for r in rows for k in r.metrics))
    metric_cols = {m: (f"{m} (final)" if m in names or m == RUN_COLUMN else m) for m in labels}
    records = []
    for i, r in enumerate(rows):
        rec: dict[str, Any] = {RUN_COLUMN: r.run}
        rec.update({n: cells[n][i] for n in names})
        rec.update({metric_cols[m]: r.metrics.get(m) for m in labels})
        records.append(rec)
    return pd.DataFrame.from_records(records, columns=[RUN_COLUMN, *names, *metric_cols.values()])


def _same(value: Any) -> str:
    # 1 and 1.0 (an int default, a float read back from JSON) are one value; True is not 1
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(float(value))
    return repr(value)


def rows_for(rows: Sequence[HpRow], runs: Iterable[str]) -> list[HpRow]:
    """The rows of ``runs`` (those the run filter matches)."""
    keep = set(runs)
    return [r for r in rows if r.run in keep]


def row_runs(table: pd.DataFrame, rows: Sequence[HpRow]) -> list[tuple[str, ...]]:
    """For each line of ``table`` (as drawn, top to bottom), the runs its row stands for."""
    by_run = {r.run: r.runs for r in rows}
    return [by_run.get(run, (run,)) for run in table[RUN_COLUMN]]


_CONDITION = re.compile(r"^\s*(?P<col>.+?)\s*(?P<op>==|!=|<=|>=|=|<|>|~)\s*(?P<val>.*?)\s*$")


def _as_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _condition(df: pd.DataFrame, part: str) -> tuple[np.ndarray | None, str | None]:
    m = _CONDITION.match(part)
    if not m:
        return (
            None,
            f"{part.strip()!r} is not a condition: write column=value, column<value or "
            "column~regex.",
        )
    col, op, raw = m["col"], m["op"], m["val"].strip("'\"")
    if col not in df.columns:
        return (
            None,
            f"No column {col!r} in the table: the columns are {', '.join(map(str, df.columns))}.",
        )
    cells = list(df[col])
    if op == "~":
        try:
            rx = re.compile(raw)
        except re.error as e:
            return None, f"{raw!r} in {part.strip()!r} is not a valid regular expression ({e.msg})."
        return np.array(
            [c is not None and bool(rx.search(str(c))) for c in cells], dtype=bool
        ), None
    num = _as_number(raw)
    compare = {
        "=": "__eq__",
        "==": "__eq__",
        "!=": "__ne__",
        "<": "__lt__",
        "<=": "__le__",
        ">": "__gt__",
        ">=": "__ge__",
    }[op]
    out = []
    for c in cells:
        cnum = c if isinstance(c, (int, float)) and not isinstance(c, bool) else None
        if num is not None and cnum is not None:
            out.append(bool(getattr(float(cnum), compare)(num)))
        elif op in ("=", "==", "!="):
            out.append((str(c).lower() == raw.lower()) == (op != "!="))
        else:
            out.append(False)  # an order on text, or on an empty cell: no match
    return np.array(out, dtype=bool), None


def filter_table(df: pd.DataFrame, text: str) -> tuple[pd.DataFrame, str | None]:
    """The rows meeting every comma-separated condition of ``text`` (``lr<0.01, opt=adam,
    run~exp3``).

    Returns ``(rows kept as a DataFrame, error line or None)``; an empty text keeps all.
    """
    keep = np.ones(len(df), dtype=bool)
    for part in [p for p in (text or "").split(",") if p.strip()]:
        mask, err = _condition(df, part)
        if err:
            return df.iloc[0:0], f"Table filter: {err}"
        keep &= mask
    return df[keep], None
