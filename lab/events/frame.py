"""``to_frame``: scalars as one long pandas DataFrame (``run, tag, step, wall_time, value``).

Owns the conversion only; pandas is imported when it is called, so a reader that never
builds a frame never pays for pandas.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

import numpy as np

from lab.events.columns import Series
from lab.events.reader import LogdirReader, RunReader


def to_frame(
    source: LogdirReader | RunReader | Mapping[str, Mapping[str, Series]],
    runs: Iterable[str] | None = None,
    tags: str | Iterable[str] | None = None,
    run_name: str = ".",
):
    """A long DataFrame ``run, tag, step, wall_time, value`` (pandas imported here).

    ``source``: a LogdirReader, a RunReader (its run is called ``run_name``)
    or ``{run: {tag: Series}}``. ``runs``: only these runs. ``tags``: a
    regular expression (``re.search``) or a list of tag names.
    """
    import pandas as pd

    if isinstance(source, LogdirReader):
        data = {r: source.scalars(r) for r in (source.run_names() if runs is None else runs)}
    elif isinstance(source, RunReader):
        data = {run_name: source.scalars()}
    else:
        data = {r: source[r] for r in (source if runs is None else runs) if r in source}
    if isinstance(tags, str):
        pattern = re.compile(tags)
        keep = pattern.search
    elif tags is not None:
        wanted = set(tags)
        keep = wanted.__contains__
    else:
        keep = None
    parts = []
    for run, series in data.items():
        for tag, s in series.items():
            if keep is None or keep(tag):
                parts.append((run, tag, s))
    if not parts:
        return pd.DataFrame(
            {
                "run": pd.Series(dtype=str),
                "tag": pd.Series(dtype=str),
                "step": pd.Series(dtype=np.int64),
                "wall_time": pd.Series(dtype=np.float64),
                "value": pd.Series(dtype=np.float64),
            }
        )
    counts = [len(s) for _, _, s in parts]
    return pd.DataFrame(
        {
            "run": np.repeat(np.array([p[0] for p in parts], dtype=object), counts),
            "tag": np.repeat(np.array([p[1] for p in parts], dtype=object), counts),
            "step": np.concatenate([s.step for _, _, s in parts]),
            "wall_time": np.concatenate([s.wall_time for _, _, s in parts]),
            "value": np.concatenate([s.value.astype(np.float64, copy=False) for _, _, s in parts]),
        }
    )
