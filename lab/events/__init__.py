"""Reading TensorBoard event files: the only part of the lab that does.

Layers, as in TensorBoard's ``backend/event_processing``: ``tfrecord`` splits a file into
verified records, ``decode`` turns record payloads into scalar columns with numpy (``protobuf``
decodes, with TensorBoard's own messages, what the fast decoder hands over), ``file_loader``
reads one file incrementally (offsets, truncation, errors), ``columns`` holds the growing
arrays, ``many`` reads many small files as one batch, ``cache`` keeps each file's columns on
disk, ``apart`` reads big cold runs in worker processes, ``reader`` merges a run folder's files
and discovers the runs of a log directory, ``frame`` turns them into a pandas DataFrame,
``hparams`` reads what TensorBoard's hparams plugin stores (``add_hparams``, Keras
``hp.hparams``), and ``export`` is the ``python -m lab scalars`` command. The reader's API is
re-exported here, so callers write ``from lab.events import LogdirReader``.
"""

from __future__ import annotations

from lab.events.columns import Series
from lab.events.frame import to_frame
from lab.events.reader import LogdirReader, RunReader, discover, refresh_all, refresh_runs

__all__ = [
    "LogdirReader",
    "RunReader",
    "Series",
    "discover",
    "refresh_all",
    "refresh_runs",
    "to_frame",
]
