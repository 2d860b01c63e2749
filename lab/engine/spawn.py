"""The one gateway through which the lab starts processes: ``start`` (a process in its own session,
its output appended to a log file) and ``run`` (a short command's captured answer).

Every other module asks here: the launcher (a run's supervisor, a page's long command), the
supervisor (the run's own command), the adopting watcher, the link check (its torchrun), Slurm's
gateway (``sbatch``, ``squeue``, ``sacct``, ``scancel``) and the stack taker (``py-spy dump``).
Never through a shell: argv is a list, so a user's text stays one item. A started process leads
its own session, so stopping it signals the whole group (``lab.engine.procs.end_tree``), and it
outlives the dashboard that started it. tests/test_boundaries.py holds every other module to it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Mapping, Protocol

# for the callers' annotations and ``except`` clauses, so that they need not import subprocess
Popen = subprocess.Popen
CompletedProcess = subprocess.CompletedProcess
TimeoutExpired = subprocess.TimeoutExpired


class Process(Protocol):
    """A process as the supervisor follows it (``lab.engine.supervise.watch.Here``): a ``Popen``
    started here, or the training root of a run found orphaned (``lab.engine.supervise.adopt``)."""

    pid: int

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def kill(self) -> None: ...


def start(
    argv: list[str],
    log_path: Path | str,
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen:
    """Start ``argv`` detached: its own session, stdin closed, stdout and stderr appended to
    ``log_path``, no inherited descriptors. The handle lets a caller that waits (the supervisor,
    the link check) read its exit code; one that does not (the launcher) lets it run."""
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


def run(
    argv: list[str], *, timeout: float, cwd: Path | str | None = None
) -> subprocess.CompletedProcess:
    """Run a short command to its end, stdin closed, its output captured as text. Raises
    ``FileNotFoundError`` when the program is not there and ``TimeoutExpired`` past ``timeout``."""
    return subprocess.run(
        argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
    )
