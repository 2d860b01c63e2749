"""Failure diagnosis material: torchrun's root-cause text, captured failures, a free port,
a torchrun command."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from lab.runfolder import REPO_ROOT


def _torchrun(run_dir: Path, port: int, nproc: int, target: list[str]) -> subprocess.Popen:
    """Start torchrun the way the supervisor does: output to RUN_DIR/stdout.log, logs and error file
    in RUN_DIR."""
    run_dir.mkdir(parents=True, exist_ok=True)
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        CUDA_VISIBLE_DEVICES="",
        TORCHELASTIC_ERROR_FILE=str(run_dir / "error.json"),
        PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        "--nnodes",
        "1",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(port),
        "--log-dir",
        str(run_dir / "logs"),
        "--tee",
        "3",
        *target,
    ]
    out = open(run_dir / "stdout.log", "wb")
    p = subprocess.Popen(
        argv, env=env, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )
    out.close()
    return p


def _free() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _captured(tmp_path: Path, text: str, error_json: dict | None = None) -> Path:
    (tmp_path / "stdout.log").write_text(text)
    if error_json:
        (tmp_path / "error.json").write_text(json.dumps(error_json))
    return tmp_path


ROOT_CAUSE = """[default0]:[rank0]: Traceback (most recent call last):
[default0]:[rank0]: {err}
============================================================
training.train FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_07:49:21
  host      : gpu-box
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 7360)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""
