"""The ways tests run the lab's command line. ``run_lab``: ``python -m lab`` as a user's shell
would, a real process in the repo, its runs folder given by ``LAB_RUNS_DIR``, output captured
(for exit codes, detached processes and what a second process sees; issue 31 moves the older
copies of this helper here). ``lab_in_process``: the same command in the test's own process,
for what it prints."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def run_lab(
    runs_dir: Path, *args: str, timeout: float = 300, **env: str
) -> subprocess.CompletedProcess:
    """``python -m lab ARGS`` with ``runs_dir`` as the runs folder and ``env`` added."""
    return subprocess.run(
        [sys.executable, "-m", "lab", *args],
        cwd=REPO_ROOT,
        env=dict(os.environ, LAB_RUNS_DIR=str(runs_dir), **env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def lab_in_process(capsys, *args: str) -> subprocess.CompletedProcess:
    """``lab ARGS`` in this process (``lab.cli.main``, the runs folder from ``LAB_RUNS_DIR`` as the
    test set it), shaped as ``run_lab``'s result: for what a command prints, at no process's cost
    (a ``python -m lab`` costs about 0.6 s of CPU here, mostly imports). ``capsys`` is pytest's
    fixture; what it held before is dropped."""
    from lab import cli  # the lab's CLI in this process: only the tests that ask for it load it

    capsys.readouterr()
    root = logging.getLogger()
    handlers = list(root.handlers)
    try:
        rc = cli.main(list(args))
    finally:  # main's logging.basicConfig would keep writing to capsys's stream after it closes
        root.handlers[:] = handlers
    out = capsys.readouterr()
    return subprocess.CompletedProcess(["lab", *args], rc, out.out, out.err)
