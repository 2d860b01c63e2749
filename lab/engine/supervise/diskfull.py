"""A full disk under a run: the words of the ``disk_full`` diagnosis, and status.json written even
then.

The trainer ends a run whose folder it cannot write with ``error: disk full: could not write to
FOLDER (...)`` (``training.diskfull``); a user's script dies with Python's ``OSError: [Errno 28]
No space left on device``. ``cause`` names the folder (the trainer's, the path in the traceback,
else the run folder) and the free space on its disk now. ``nearly_full``: a failed run without a
better diagnosis whose folder has less than ``NEARLY_FULL_BYTES`` free is ``disk_full`` too (its
last line may not have found room in stdout.log). ``write_status`` is the supervisor's write of
status.json: atomic, and on a full disk rewritten in place (the old file's space is reused)
rather than lost, with a warning in the supervisor's log; it never raises for a full disk.
"""

from __future__ import annotations

import errno
import json
import logging
import re
import shutil
from pathlib import Path

from lab.runfolder import write_json_atomic

log = logging.getLogger(__name__)
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
NEARLY_FULL_BYTES = 1024 * 1024
_TRAINER = re.compile(r"error: disk full: could not write to (.+?) \((?:no space|disk quota)")
_PATH = re.compile(r"(?:No space left on device|Disk quota exceeded): '([^'\n]+)'")


def is_full(e: BaseException) -> bool:
    """Is ``e`` a write refused for want of space (ENOSPC) or quota (EDQUOT)?"""
    return isinstance(e, OSError) and e.errno in FULL_ERRNOS


def size_text(n: float) -> str:
    """Bytes in words: ``512 B``, ``12.0 KiB``, ``3.4 GiB``."""
    if n < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            break
    return f"{n:.1f} {unit}"


def free_bytes(folder: Path | str) -> int | None:
    """The free space of ``folder``'s disk (its nearest existing parent's), None when unknown."""
    probe = Path(folder)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return None


def nearly_full(folder: Path | str) -> bool:
    free = free_bytes(folder)
    return free is not None and free < NEARLY_FULL_BYTES


def cause(run_dir: Path, text: str) -> str:
    """The ``disk_full`` cause: which folder could not be written and the free space there now."""
    said, path = _TRAINER.search(text), _PATH.search(text)
    folder = Path(said.group(1)) if said else Path(path.group(1)).parent if path else run_dir
    free = free_bytes(folder)
    left = "free space unknown" if free is None else f"{size_text(free)} free now"
    return (
        f"The disk under {folder} is full ({left}): a write failed with 'No space left on "
        "device' (ENOSPC) or 'Disk quota exceeded' (EDQUOT), so the run stopped; the files it "
        "wrote before stay readable and the last complete checkpoint is kept."
    )


def write_status(path: Path, data: dict) -> bool:
    """Write status.json atomically; on a full disk, over the old file in place. False: not
    written (logged)."""
    try:
        write_json_atomic(path, data)
        return True
    except OSError as e:
        if not is_full(e):
            raise
        first = e
    text = json.dumps(data, indent=1, default=str).encode()
    try:  # the old file's blocks hold the new text when it is not longer
        with open(path, "r+b", buffering=0) as f:
            old = f.read()
            try:
                _put(f, text)
            except OSError:  # longer, and no block for the rest: the old text back, whole
                _put(f, old)
                raise
        log.warning("disk full: %s rewritten in place (%s)", path, first)
        return True
    except OSError as e:
        if not is_full(e) and not isinstance(e, FileNotFoundError):
            raise
        log.warning("disk full: %s not written, kept in memory until there is room (%s)", path, e)
        return False


def _put(f, data: bytes) -> None:
    f.seek(0)
    view = memoryview(data)
    while view:
        view = view[f.write(view) :]
    f.truncate()
