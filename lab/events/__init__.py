"""Reading TensorBoard event files: the only part of the lab that does.

Layers, as in TensorBoard's ``backend/event_processing``: ``tfrecord`` splits
a file into verified records, ``decode`` turns record payloads into scalar
columns (``protobuf`` is the slow path for what the fast decoder does not
handle), ``columns`` holds the growing arrays, ``reader`` reads one run
folder or a whole log directory incrementally, and ``export`` is the
``python -m lab scalars`` command. The reader's API is re-exported here, so
callers write ``from lab.events import LogdirReader``.
"""
from lab.events.columns import Column, Series
from lab.events.reader import LogdirReader, RunReader, discover, is_event_file, to_frame

__all__ = ["Column", "LogdirReader", "RunReader", "Series", "discover", "is_event_file", "to_frame"]
