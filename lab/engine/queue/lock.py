"""The queue's lock: ``fcntl.flock`` on ``<runs>/.queue/lock``, which records its holder.

The kernel drops a flock when its holder dies, so a crashed holder cannot keep it; the file names
the holder (pid and create time) so a stuck lock can be traced (``holder``) and a lock whose
recorded holder is gone is known stale."""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lab.engine import procs

_POLL_S = 0.01


def holder(path: Path) -> dict | None:
    """The recorded holder ``{"pid", "ct"}`` when it is alive, else None."""
    try:
        d = json.loads(path.read_text() or "null")
    except (OSError, ValueError):
        return None
    if isinstance(d, dict) and procs.alive(d.get("pid"), d.get("ct")):
        return d
    return None


@contextmanager
def locked(path: Path, timeout_s: float = 30.0) -> Iterator[None]:
    """Hold the lock ``path`` for the block; raise TimeoutError after ``timeout_s``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        end = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > end:
                    raise TimeoutError(
                        f"the queue lock {path} stayed held for {timeout_s:.0f} s "
                        f"(by {holder(path) or 'a process now gone'})"
                    ) from None
                time.sleep(_POLL_S)
        me = json.dumps({"pid": os.getpid(), "ct": procs.create_time(os.getpid())})
        os.ftruncate(fd, 0)
        os.pwrite(fd, me.encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
