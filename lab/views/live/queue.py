"""The queue as Home shows it: one row per waiting run (or sweep), in the order they will start,
with the devices it needs and what it waits for (``lab.engine.queue.book.listing``)."""

from __future__ import annotations

from pathlib import Path

from lab.engine.queue import book


def waiting_rows(root: Path) -> list[dict]:
    """The waiting entries of ``root``'s queue as table rows (empty when none waits)."""
    return [
        {
            "#": e["position"],
            "run or sweep": e["id"],
            "devices": ", ".join(e["devices"]) + (" (exclusive)" if e.get("exclusive") else ""),
            "waiting for": ", ".join(e["waiting_for"]),
        }
        for e in book.listing(root)
        if e["state"] == book.WAITING
    ]
