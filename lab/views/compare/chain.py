"""A resumed run and the runs it continues, drawn as one curve: ``ancestors`` is the chain of
``resumed_from`` behind a run, oldest first; ``joined`` concatenates the chain's scalars tag by tag,
each earlier run's points kept only before its successor's first step (the successor redid the
steps after its checkpoint), the device samples (``sys/``) the newest run's alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lab.events.columns import Series
from lab.views.runscalars import SYS_PREFIX


def ancestors(record: Any, by_id: Mapping[str, Any], limit: int = 100) -> list[Any]:
    """The runs ``record`` continues, oldest first (empty when it was not resumed); a loop is
    cut."""
    out: list[Any] = []
    seen = {record.run_id}
    cur = by_id.get(getattr(record, "resumed_from", None) or "")
    while cur is not None and cur.run_id not in seen and len(out) < limit:
        out.append(cur)
        seen.add(cur.run_id)
        cur = by_id.get(getattr(cur, "resumed_from", None) or "")
    return out[::-1]


def _join_two(a: Any, b: Any) -> Series:
    steps_b = np.asarray(b.step)
    first = int(steps_b.min()) if len(steps_b) else None
    keep = np.asarray(a.step) < first if first is not None else np.ones(len(a.step), dtype=bool)
    return Series(
        np.concatenate([np.asarray(a.step)[keep], steps_b]),
        np.concatenate(
            [np.asarray(a.wall_time, dtype=float)[keep], np.asarray(b.wall_time, dtype=float)]
        ),
        np.concatenate([np.asarray(a.value, dtype=float)[keep], np.asarray(b.value, dtype=float)]),
    )


def joined(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The scalars of a chain (oldest first) as one run's: every tag concatenated at the successor's
    first step."""
    out: dict[str, Any] = {}
    for part in parts:
        for tag, s in part.items():
            # device samples count samples, not steps, and start again in every run: the latest
            # run's
            out[tag] = (
                _join_two(out[tag], s) if tag in out and not tag.startswith(SYS_PREFIX) else s
            )
    return out
