"""The scalar event files the lab itself writes into a run folder: the supervisor's device samples
(``sys/``), a Slurm node's (``sys/node<k>/``) and the health watch's findings (``health/``).

Written with tensorboard's own ``EventFileWriter`` and protos, never torch (importing torch costs
the supervisor seconds and hundreds of MB), so ``lab.events`` reads them like the trainer's.
"""

from __future__ import annotations

from pathlib import Path


class ScalarWriter:
    """A minimal scalar event writer over tensorboard's EventFileWriter."""

    def __init__(self, logdir: Path) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        Path(logdir).mkdir(parents=True, exist_ok=True)
        self._Event, self._Summary = Event, Summary
        self._w = EventFileWriter(str(logdir), max_queue_size=64, flush_secs=5)

    def add(self, values: dict[str, float], step: int, wall_time: float) -> None:
        vals = [self._Summary.Value(tag=t, simple_value=float(v)) for t, v in values.items()]
        if vals:
            self._w.add_event(
                self._Event(wall_time=wall_time, step=step, summary=self._Summary(value=vals))
            )

    def flush(self) -> None:
        self._w.flush()

    def close(self) -> None:
        self._w.close()
