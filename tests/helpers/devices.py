"""Scalars read back from a run's event files."""

from __future__ import annotations

import glob


def _load_scalars(logdir) -> dict[str, list[float]]:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    out: dict[str, list[float]] = {}
    for f in glob.glob(f"{logdir}/events.out.tfevents.*"):
        for ev in EventFileLoader(f).Load():
            for v in ev.summary.value:
                val = (
                    v.simple_value
                    if v.HasField("simple_value")
                    else float(tensor_util.make_ndarray(v.tensor))
                )
                out.setdefault(v.tag, []).append(val)
    return out
