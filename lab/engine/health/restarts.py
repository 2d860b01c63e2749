"""torchrun's restarts of a run (``--max-restarts``), read from its logs: how many, and why each
one.

torchrun starts each attempt's workers with their logs under
``logs/<job>/attempt_<n>/<rank>/``; when a worker fails and restarts are
left, it logs ``failed (exitcode: X) local_rank: R (pid: P)`` and starts
attempt n+1. ``restarts(run_dir)`` pairs the two: one entry per attempt after
the first, ``{"attempt", "rank", "exit_code", "cause"}``, the cause in words
(a signal's name, or the last error line of that rank's log in the failed
attempt). The supervisor keeps the list as status.json's ``restarts``.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

from lab.engine.logs import PEER_LOST, RANK_FILES, last_lines, without_prefixes
from lab.runfolder import LOGS_DIR, STDOUT_LOG

_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
_ERROR = re.compile(r"^(?:\w+\.)*\w*(?:Error|Exception|Interrupt)\b.*|^error: .*")
_ATTEMPT = re.compile(r"attempt_(\d+)")
LOST_PEER = "it lost a peer: the failure began on another rank"
MAX_LOG_BYTES = 8 * 2**20  # torchrun's lines are read from this much of stdout.log's end at most


def _attempts(run_dir: Path) -> dict[int, Path]:
    """attempt number -> its folder, over every job folder under logs/."""
    out: dict[int, Path] = {}
    for d in Path(run_dir, LOGS_DIR).glob("*/attempt_*"):
        m = _ATTEMPT.fullmatch(d.name)
        if m and d.is_dir():
            out[int(m.group(1))] = d
    return out


def _failures(run_dir: Path) -> list[tuple[int, int]]:
    """(exit code, local rank) of each failure torchrun logged, oldest first."""
    path = Path(run_dir, STDOUT_LOG)
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - MAX_LOG_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [(int(m.group(1)), int(m.group(2))) for m in _FAILED.finditer(text)]


def cause_of(exit_code: int | None, rank: int | None, attempt_dir: Path | None) -> str:
    """One line: which rank ended how, and the last error line of its log in that attempt."""
    who = "a worker" if rank is None else f"local rank {rank}"
    if exit_code is None:
        return f"{who} failed"
    if exit_code < 0:
        try:
            how = f"was killed by {signal.Signals(-exit_code).name}"
        except ValueError:
            how = f"was killed by signal {-exit_code}"
    else:
        how = f"exited with code {exit_code}"
    last = ""
    if attempt_dir is not None and rank is not None:
        lines = [ln for name in RANK_FILES for ln in last_lines(attempt_dir / str(rank) / name, 40)]
        stripped = (without_prefixes(ln).strip() for ln in lines)
        errors = [ln for ln in stripped if _ERROR.match(ln)]
        last = f": {errors[-1]}" if errors else ""
        if errors and PEER_LOST.search(errors[-1]):
            # torchrun logs one failure per attempt, the first it saw: this rank's, though it only
            # lost its peer; the rank that failed first (killed, say) is not in torchrun's log
            last += f" ({LOST_PEER})"
    return f"{who} {how}{last}"


def restarts(run_dir: Path | str) -> list[dict]:
    """One entry per restart torchrun made, oldest first (empty for a run that never restarted)."""
    attempts = _attempts(Path(run_dir))
    failures = _failures(Path(run_dir))
    out = []
    for n in sorted(a for a in attempts if a > 0):
        code, rank = failures[n - 1] if n - 1 < len(failures) else (None, None)
        out.append(
            {
                "attempt": n,
                "rank": rank,
                "exit_code": code,
                "cause": cause_of(code, rank, attempts.get(n - 1)),
            }
        )
    return out
