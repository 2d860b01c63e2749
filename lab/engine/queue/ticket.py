"""A supervisor's place in the queue: join, wait for its turn, leave.

``Ticket(root, entry_id, runs, devices, exclusive)`` joins the queue (``book``); ``wait`` blocks
until the entry may start, calling ``on_wait({"position", "waiting_for"})`` whenever that changes
(the supervisor writes it into status.json's ``queue``), and returns False when ``cancelled()``
says to give up; ``leave`` (or the ``with`` block's end) removes the entry. A supervisor that dies
leaves nothing behind: the book drops entries of dead supervisors."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from lab.engine import procs
from lab.engine.queue import book
from lab.runfolder import now_iso

_POLL_S = 0.2


class Ticket:
    """One entry of the queue: a run, or a whole sweep (``entry_id`` its sweep id)."""

    def __init__(
        self, root: Path, entry_id: str, runs: list[str], devices: list[str], exclusive: bool
    ) -> None:
        self.root, self.id = Path(root), entry_id
        pid = os.getpid()
        self.entry = {
            "id": entry_id,
            "runs": list(runs),
            "devices": list(devices),
            "exclusive": bool(exclusive),
            "pid": pid,
            "ct": procs.create_time(pid),
            "state": book.WAITING,
            "since": now_iso(),
        }
        with book.editing(self.root) as entries:
            entries.append(self.entry)

    def _try_start(self) -> dict | None:
        """Start if nothing blocks (and say so with None), else what the wait is for."""
        with book.editing(self.root) as entries:
            mine = next((e for e in entries if e["id"] == self.id), None)
            if mine is None:  # dropped (our pid was misread as dead): join again at the end
                entries.append(self.entry)
            found = book.blockers(entries, self.id)
            if not found:
                next(e for e in entries if e["id"] == self.id)["state"] = book.RUNNING
                return None
            return {
                "position": book.position(entries, self.id),
                "waiting_for": [e["id"] for e in found],
            }

    def wait(
        self,
        on_wait: Callable[[dict], None] = lambda q: None,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> bool:
        """Block until this entry runs (True) or ``cancelled()`` (False)."""
        shown = None
        while True:
            if cancelled():
                return False
            why = self._try_start()
            if why is None:
                return True
            if why != shown:
                on_wait(why)
                shown = why
            time.sleep(_POLL_S)

    def leave(self) -> None:
        with book.editing(self.root) as entries:
            entries[:] = [e for e in entries if e["id"] != self.id]

    def __enter__(self) -> Ticket:
        return self

    def __exit__(self, *exc) -> None:
        self.leave()


@contextmanager
def turn(
    root: Path,
    entry_id: str,
    runs: list[str],
    gpus: list[int],
    exclusive: bool,
    mark: Callable[..., None],
    cancelled: Callable[[], bool],
) -> Iterator[bool]:
    """Join the queue, wait for the turn and hold it for the block: yields True when it came,
    False when ``cancelled()``. ``mark(queue=...)`` records the wait (``{"position",
    "waiting_for"}``, then None once started) in the runs' status.json."""
    ticket = Ticket(root, entry_id, runs, book.devices_of(gpus), exclusive)
    try:
        came = ticket.wait(lambda q: mark(queue=q), cancelled)
        mark(queue=None)
        yield came
    finally:
        ticket.leave()
