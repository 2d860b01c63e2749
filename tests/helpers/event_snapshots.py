"""Event files changed under a reader: a flipped byte, a snapshot of a folder."""

from __future__ import annotations

from lab import events


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


def snapshot(reader: events.LogdirReader):
    return {
        run: {t: (s.step.tolist(), s.wall_time.tolist(), s.value.tolist()) for t, s in sc.items()}
        for run in reader.run_names()
        for sc in [reader.scalars(run)]
    }
