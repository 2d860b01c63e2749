"""The trainer as a subprocess: a run of training.train with the test's options."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


# the CPU, even on a GPU box
CPU_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}


def trainer(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = CPU_ENV
    return subprocess.run(
        [sys.executable, "-m", "training.train", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
