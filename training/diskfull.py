"""A full disk: every write of the run folder goes through ``writing(folder)``.

An ``OSError`` with ``ENOSPC`` (no space left on device) or ``EDQUOT`` (disk quota exceeded)
inside ``writing(folder)`` becomes ``DiskFull``, which names the folder and the free space left on
its disk (``shutil.disk_usage``, read after the failed write's temp file is gone).
``training.train`` ends the run on it with one ``error: disk full: ...`` line on stderr and exit
``DISK_FULL_EXIT``; the lab diagnoses that line ``disk_full``. What was written before stays
readable: JSON files and checkpoints are written to a temp file and renamed, and an event file
ends at most with a partial record, which readers drop. Loads before torch; imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
from pathlib import Path
from typing import Iterator

DISK_FULL_EXIT = 4  # the exit code of a run that could not write its run folder
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def is_full(e: BaseException) -> bool:
    """Is ``e`` a write refused for want of space (ENOSPC) or quota (EDQUOT)?"""
    return isinstance(e, OSError) and e.errno in FULL_ERRNOS


def size_text(n: float) -> str:
    """Bytes in words: ``512 B``, ``12.0 KiB``, ``3.4 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def free_text(folder: Path) -> str:
    """E.g. ``"12.0 KiB free of 2.0 MiB"``: the free space of ``folder``'s disk, or why unknown."""
    probe = Path(folder)
    while not probe.exists() and probe != probe.parent:  # a folder the full disk never let exist
        probe = probe.parent
    try:
        usage = shutil.disk_usage(probe)
    except OSError as e:
        return f"free space unknown ({e.strerror})"
    return f"{size_text(usage.free)} free of {size_text(usage.total)}"


class DiskFull(Exception):
    """A write into ``folder`` failed because its disk (or the user's quota) is full."""

    def __init__(self, folder: Path, error: OSError) -> None:
        self.folder, self.error = Path(folder), error
        super().__init__(str(folder))

    def line(self) -> str:
        """The one line the trainer prints on stderr (the lab's ``disk_full`` matches it)."""
        why = "disk quota exceeded" if self.error.errno == errno.EDQUOT else "no space left"
        return (
            f"error: disk full: could not write to {self.folder} ({why}; "
            f"{free_text(self.folder)} on its disk): free space there or give --log-dir on "
            "another disk"
        )


@contextlib.contextmanager
def writing(folder: Path) -> Iterator[None]:
    """Turn a full disk's ``OSError`` raised inside into ``DiskFull(folder)``."""
    try:
        yield
    except OSError as e:
        if is_full(e):
            raise DiskFull(folder, e) from e
        raise
