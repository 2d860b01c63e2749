"""``python -m lab scalars LOGDIR``: every scalar of every run below a folder, as CSV or JSON (the
reader's own command, ``lab.events.export``, which also runs alone)."""

from __future__ import annotations

from lab.events import export


def add_parser(sub) -> None:
    export.add_parser(sub)
