"""Reading a run's logs: the last lines, one rank's lines, and following them live.

The supervisor writes the combined output of the training command to
RUN_DIR/stdout.log; under torchrun (``--tee 3``) each line there carries a
``[default<local rank>]:`` prefix and each rank also has its own files under
RUN_DIR/logs/<job>/attempt_<n>/<local rank>/. ``tail`` and ``follow`` read
these without ever loading a whole large file.
"""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Iterator

from lab.runfolder import FINAL_STATES, read_json

_PREFIX = re.compile(r"^\[default(\d+)\]:")


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


def _rank_dirs(run_dir: Path) -> dict[int, Path]:
    """local rank -> its folder in the latest attempt."""
    out: dict[int, Path] = {}
    for d in sorted(Path(run_dir, "logs").glob("*/attempt_*/*"), key=lambda p: (p.parent.name, str(p))):
        if d.is_dir() and d.name.isdigit():
            out[int(d.name)] = d
    return out


def ranks(run_dir: Path | str) -> list[int]:
    """The local ranks that have logs (empty for single/dp runs)."""
    return sorted(_rank_dirs(Path(run_dir)))


def tail(run_dir: Path | str, lines: int = 200, rank: int | None = None) -> str:
    """The last ``lines`` lines of the run's output, or of one rank's output."""
    run_dir = Path(run_dir)
    if rank is None:
        return "\n".join(_tail_text(run_dir / "stdout.log", lines))
    # the combined log keeps stdout and stderr of a rank in their real order
    wanted = f"[default{int(rank)}]:"
    mine = [ln[len(wanted):] for ln in _tail_text(run_dir / "stdout.log", lines * 8) if ln.startswith(wanted)]
    if mine:
        return "\n".join(mine[-lines:])
    d = _rank_dirs(run_dir).get(int(rank))
    if d is None:
        return ""
    both = _tail_text(d / "stdout.log", lines) + _tail_text(d / "stderr.log", lines)
    return "\n".join(both[-lines:])


def follow(run_dir: Path | str, rank: int | None = None, poll_s: float = 0.5,
           start_lines: int = 20) -> Iterator[str]:
    """Yield the last ``start_lines`` lines, then each new line, until the run is over."""
    run_dir = Path(run_dir)
    path = run_dir / "stdout.log"
    for ln in tail(run_dir, start_lines, rank).splitlines():
        yield ln
    pos = path.stat().st_size if path.exists() else 0
    buf = b""
    wanted = None if rank is None else f"[default{int(rank)}]:"
    while True:
        done = (read_json(run_dir / "status.json") or {}).get("state") in FINAL_STATES
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
                yield ln[len(wanted):]
        if done and not data:
            if buf:
                yield buf.decode("utf-8", "replace")
            return
        time.sleep(poll_s)
