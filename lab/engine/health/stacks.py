"""Every rank's Python stack, taken from the outside and saved as ``stacks/rank<i>-<time>.txt`` in
the run folder.

The supervisor calls ``take`` when a run stalls (``lab.engine.health.rules``) or on a
``stacks.request`` (the Live page's "Dump stacks now"). Which processes are the
ranks: torchrun's workers by their ``LOCAL_RANK`` (``procs.rank_pids``), else
the command itself (single, DP). The lab's trainer installs a SIGUSR1 handler
that prints every thread's stack to its stderr (``training.debug``): the rank
gets SIGUSR1, only once its handler is in place (its ``SigCgt`` mask says so,
so the signal can never kill it), and the dump is cut out of the rank's log
(``logs.rank_dirs``, or stdout.log outside torchrun). Any other process (a
user's script, a rank not yet that far, torchrun's agent) is read with
``py-spy dump --pid`` (``PY_SPY_ENV`` names the binary, else the one beside
Python or on PATH); where that is not allowed, the note says exactly why
(``kernel.yama.ptrace_scope``, a missing capability). This module starts
processes (py-spy) and signals ranks: a documented allowance of
tests/test_boundaries.py, beside the launcher and supervisor.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from lab.engine import logs, procs, spawn
from lab.runfolder import STACKS_DIR, STDOUT_LOG, TRAINER, stamp

STACK_SIGNAL = signal.SIGUSR1  # what training.debug registers
PY_SPY_ENV = "LAB_PY_SPY"
DUMP_WAIT_S = 5.0  # for a signalled rank's dump to reach its log
SETTLED_S = 0.3  # the log has stopped growing for this long: the dump is whole
PY_SPY_TIMEOUT_S = 20.0
_DUMP_LINE = re.compile(
    r"^(?:(?:Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):"
    r"|  File \".*\", line \d+ in .*|  <no Python frame>|  \.\.\.)$"
)
PTRACE_SCOPE = Path("/proc/sys/kernel/yama/ptrace_scope")


@dataclass
class Dump:
    """One taking of stacks: when, the files written (relative to the run folder), and what could
    not be taken."""

    at: str
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "files": list(self.files), "notes": list(self.notes)}


def catches(pid: int, sig: int) -> bool:
    """Whether ``pid`` handles ``sig`` (Linux's SigCgt mask in /proc): sending it then cannot kill
    it."""
    try:
        with open(f"/proc/{int(pid)}/status", encoding="ascii") as f:
            mask = next(int(ln.split()[1], 16) for ln in f if ln.startswith("SigCgt:"))
    except (OSError, ValueError, StopIteration):
        return False
    return bool(mask >> (int(sig) - 1) & 1)


def cut_faulthandler(text: str) -> str:
    """The lines of faulthandler's dump in ``text`` (a log's new part), other output left out."""
    keep = [ln if _DUMP_LINE.match(ln) else "" for ln in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(keep)).strip() + "\n"


def py_spy() -> str | None:
    """The py-spy binary to use, or None when there is none."""
    named = os.environ.get(PY_SPY_ENV)
    if named:
        return named if os.access(named, os.X_OK) else None
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if os.access(beside, os.X_OK) else shutil.which("py-spy")


def ptrace_note() -> str:
    """Why attaching to another process may be refused here, in one clause."""
    try:
        scope = int(PTRACE_SCOPE.read_text().strip())
    except (OSError, ValueError):
        scope = None
    if scope:
        return (
            f"kernel.yama.ptrace_scope is {scope} (1: only a parent may attach, 2: only root, 3: "
            "nobody): "
            "run the dashboard as root, or `sysctl kernel.yama.ptrace_scope=0`"
        )
    if os.geteuid() != 0:
        return "attaching needs the same user as the run, or root"
    return (
        "a container needs --cap-add SYS_PTRACE (and no seccomp profile refusing ptrace) "
        "for py-spy to attach"
    )


def _spy(pid: int) -> tuple[str | None, str | None]:
    """(py-spy's dump of ``pid``, None) or (None, why not)."""
    exe = py_spy()
    if exe is None:
        return (
            None,
            "py-spy is not installed: pip install -r requirements.txt (py-spy), or set "
            f"{PY_SPY_ENV}",
        )
    try:
        done = spawn.run([exe, "dump", "--pid", str(pid)], timeout=PY_SPY_TIMEOUT_S)
    except (OSError, spawn.TimeoutExpired) as e:
        return None, f"py-spy dump --pid {pid} failed ({e})"
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return None, f"py-spy could not read pid {pid} ({why[0]}): {ptrace_note()}"
    return done.stdout, None


def _log_of(run_dir: Path, rank: int, under_torchrun: bool) -> Path:
    if under_torchrun:
        d = logs.rank_dirs(run_dir).get(rank)
        if d is not None:
            return d / "stderr.log"
    return run_dir / STDOUT_LOG


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def _signalled(run_dir: Path, targets: dict[int, int], under_torchrun: bool) -> dict[int, str]:
    """SIGUSR1 to each rank at once, then each one's dump cut out of its log; missing ranks left
    out."""
    sources = {r: _log_of(run_dir, r, under_torchrun) for r in targets}
    start = {r: _size(p) for r, p in sources.items()}
    for pid in targets.values():
        try:
            os.kill(pid, STACK_SIGNAL)
        except OSError:
            continue
    sizes, still = dict(start), time.monotonic()
    end = time.monotonic() + DUMP_WAIT_S
    while time.monotonic() < end:  # until every log grew and then held still
        now = {r: _size(p) for r, p in sources.items()}
        if now != sizes:
            sizes, still = now, time.monotonic()
        elif all(now[r] > start[r] for r in now) and time.monotonic() - still > SETTLED_S:
            break
        time.sleep(0.05)
    out = {}
    for r, p in sources.items():
        try:
            with open(p, "rb") as f:
                f.seek(start[r])
                text = cut_faulthandler(f.read().decode("utf-8", "replace"))
        except OSError:
            continue
        if text.strip():
            out[r] = text
    return out


def _write(run_dir: Path, name: str, header: str, text: str, when: str) -> str:
    folder = run_dir / STACKS_DIR
    folder.mkdir(exist_ok=True)
    path, n = folder / f"{name}-{when}.txt", 1
    while path.exists():  # two dumps within one second
        n += 1
        path = folder / f"{name}-{when}-{n}.txt"
    path.write_text(f"# {header}\n{text}")
    return f"{STACKS_DIR}/{path.name}"


def take(
    run_dir: Path, kind: str, under_torchrun: bool, root_pid: int, tree: Iterable[Any]
) -> Dump:
    """Every rank's stack now, each saved in its own file; the notes say what could not be taken and
    why."""
    run_dir, when = Path(run_dir), stamp()
    dump = Dump(at=when)
    ranks = procs.rank_pids(tree) if under_torchrun else {0: root_pid}
    if not ranks:  # torchrun has not started its workers (yet): its own stack says where it waits
        dump.notes.append(
            "no rank processes yet: torchrun is still starting them; its own stack is saved"
        )
        ranks_named = {"torchrun": root_pid}
    else:
        ranks_named = {f"rank{r}": pid for r, pid in ranks.items()}
    handled = {r: pid for r, pid in ranks.items() if kind == TRAINER and catches(pid, STACK_SIGNAL)}
    for r, text in _signalled(run_dir, handled, under_torchrun).items():
        dump.files.append(
            _write(
                run_dir,
                f"rank{r}",
                f"rank {r} (pid {handled[r]}) at {when}, by faulthandler (SIGUSR1)",
                text,
                when,
            )
        )
    for name, pid in ranks_named.items():
        if (
            name.startswith("rank")
            and int(name[4:]) in handled
            and any(f"/{name}-" in f for f in dump.files)
        ):
            continue
        text, why = _spy(pid)
        if text is None:
            dump.notes.append(f"{name} (pid {pid}): {why}")
        else:
            dump.files.append(
                _write(run_dir, name, f"{name} (pid {pid}) at {when}, by py-spy dump", text, when)
            )
    return dump
