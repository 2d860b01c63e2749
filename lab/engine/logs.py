"""Reading a run's logs: the last lines, one rank's lines, and following them live.

The supervisor writes the combined output of the training command to
RUN_DIR/stdout.log; under torchrun (``--tee 3``) each line there carries a
``[default<local rank>]:`` prefix and each rank also has its own files under
RUN_DIR/logs/<job>/attempt_<n>/<local rank>/ (``rank_dirs`` finds them, for
``diagnose`` too). ``tail`` and ``follow`` read these without ever loading a
whole large file.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Iterator

from lab.engine import registry
from lab.runfolder import LOGS_DIR, STDOUT_LOG, is_final


def _tail_text(path: Path, lines: int) -> list[str]:
    """The last ``lines`` lines of ``path``, reading only as much of its end as needed."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            chunk = max(4096, lines * 160)
            while True:
                start = max(0, size - chunk)
                f.seek(start)
                data = f.read(size - start)
                if start == 0 or data.count(b"\n") > lines:
                    break
                chunk *= 4
    except OSError:
        return []
    out = data.decode("utf-8", "replace").splitlines()
    if start > 0:
        out = out[1:]  # the first line is cut in the middle
    return out[-lines:] if lines > 0 else []


last_lines = _tail_text  # public: other engine modules read a log file's end the same way

# the prefixes under torchrun: ``[default<n>]:`` on stdout.log's teed lines, and ``[rank<n>]: ``
# on each line of a rank's traceback, in its own stderr.log too (torch 2.14 here)
_PREFIX = re.compile(r"^(?:\[default\d+\]:)?(?:\[rank\d+\]:\s?)?", re.M)


def without_prefixes(text: str) -> str:
    """``text`` with torchrun's per-line prefixes removed, so an error line reads as written."""
    return _PREFIX.sub("", text)


# what a rank says when a peer died under it (gloo, NCCL, the rendezvous store): its failure only
# follows another rank's, so the failure diagnosis and the restart record look past it
PEER_LOST = re.compile(
    r"Connection (?:reset|closed) by peer|Broken pipe|ECONNRESET|remote process exited|"
    r"Socket Timeout|peer closed",
    re.I,
)

RANK_FILES = ("stdout.log", "stderr.log")  # torchrun's names inside each rank folder


def _attempt(d: Path) -> int:
    m = re.fullmatch(r"attempt_(\d+)", d.name)
    return int(m.group(1)) if m else -1


def rank_dirs(run_dir: Path | str) -> dict[int, Path]:
    """local rank -> its log folder (logs/<job>/attempt_<n>/<rank>/); the latest attempt wins."""
    found = [
        d for d in Path(run_dir, LOGS_DIR).glob("*/attempt_*/*") if d.is_dir() and d.name.isdigit()
    ]
    found.sort(key=lambda d: (_attempt(d.parent), str(d)))
    return {int(d.name): d for d in found}


def ranks(run_dir: Path | str) -> list[int]:
    """The local ranks that have logs (empty for single/dp runs)."""
    return sorted(rank_dirs(run_dir))


def tail(run_dir: Path | str, lines: int = 200, rank: int | None = None) -> str:
    """The last ``lines`` lines of the run's output, or of one rank's output."""
    run_dir = Path(run_dir)
    if rank is None:
        return "\n".join(_tail_text(run_dir / STDOUT_LOG, lines))
    # the combined log keeps stdout and stderr of a rank in their real order
    wanted = f"[default{int(rank)}]:"
    mine = [
        ln[len(wanted) :]
        for ln in _tail_text(run_dir / STDOUT_LOG, lines * 8)
        if ln.startswith(wanted)
    ]
    if mine:
        return "\n".join(mine[-lines:])
    d = rank_dirs(run_dir).get(int(rank))
    if d is None:
        return ""
    both = [ln for name in RANK_FILES for ln in _tail_text(d / name, lines)]
    return "\n".join(both[-lines:])


def follow(
    run_dir: Path | str, rank: int | None = None, poll_s: float = 0.5, start_lines: int = 20
) -> Iterator[str]:
    """Yield the last ``start_lines`` lines, then each new line, until the run is over."""
    run_dir = Path(run_dir)
    path = run_dir / STDOUT_LOG
    for ln in tail(run_dir, start_lines, rank).splitlines():
        yield ln
    pos = path.stat().st_size if path.exists() else 0
    buf = b""
    wanted = None if rank is None else f"[default{int(rank)}]:"
    while True:
        done = is_final(registry.status_record(run_dir).state)  # a lost run is over too
        try:
            with open(path, "rb") as f:
                f.seek(pos)
                data = f.read()
        except OSError:
            data = b""
        pos += len(data)
        buf += data
        *complete, buf = buf.split(b"\n")
        for raw in complete:
            ln = raw.decode("utf-8", "replace")
            if wanted is None:
                yield ln
            elif ln.startswith(wanted):
                yield ln[len(wanted) :]
        if done and not data:
            if buf:
                yield buf.decode("utf-8", "replace")
            return
        time.sleep(poll_s)
