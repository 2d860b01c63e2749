"""Event-file records written by hand: a file header and one framed record."""

from __future__ import annotations

from tensorboard.compat.proto import event_pb2, summary_pb2

from lab.events.tfrecord import frame


def rec(tag: str, step: int, value: float, wall: float | None = None) -> bytes:
    ev = event_pb2.Event(
        wall_time=1_700_000_000.0 + step if wall is None else wall,
        step=step,
        summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]),
    )
    return frame(ev.SerializeToString())


def header(wall: float = 1_700_000_000.0) -> bytes:
    return frame(event_pb2.Event(wall_time=wall, file_version="brain.Event:2").SerializeToString())
