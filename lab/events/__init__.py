"""Reading TensorBoard event files: the only part of the lab that does.

Layers, as in TensorBoard's ``backend/event_processing``: ``tfrecord`` splits
a file into verified records, ``decode`` turns record payloads into scalar
columns with numpy (``protobuf`` decodes, with TensorBoard's own messages,
what the fast decoder hands over), ``file_loader`` reads one file
incrementally (offsets, truncation, errors), ``columns`` holds the growing
arrays, ``reader`` merges a run folder's files and discovers the runs of a
log directory, ``hparams`` reads what TensorBoard's hparams plugin stores
(``add_hparams``, Keras ``hp.hparams``), and ``export`` is the ``python -m
lab scalars`` command. The
reader's API is re-exported here, so callers write
``from lab.events import LogdirReader``.
"""

from __future__ import annotations

from lab.events.columns import Series
from lab.events.reader import LogdirReader, RunReader, discover, refresh_runs, to_frame

__all__ = ["LogdirReader", "RunReader", "Series", "discover", "refresh_runs", "to_frame"]
