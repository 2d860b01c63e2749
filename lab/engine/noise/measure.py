"""Measuring the noise floor: one config run N times as one sweep, then the record.

``start`` launches the N identical runs as a sweep (``launcher.launch_sweep``): one supervisor runs
them one after another, and a sweep is exclusive in the queue, so they take turns with nothing
else the lab runs. ``finish`` waits for them, reads each run's steady-state throughput
(summary.json's ``throughput`` median: its logging windows without the warm-up one) and writes
the record (``lab.engine.noise.record``). ``start_in_background`` runs ``python -m lab noise`` as
a detached process, for a page's button: the record appears when the runs have ended.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from lab.engine.launch import launcher
from lab.engine.launch.runconfig import RunConfig, world_size
from lab.engine.noise import record
from lab.runfolder import REPO_ROOT, SUCCEEDED, SUMMARY_JSON, read_json, stamp

_children: list[subprocess.Popen] = []  # polled so they never linger as zombies


class NoiseError(RuntimeError):
    """The measurement cannot be made or finished; the message names the fix."""


def check_runs(n: int) -> None:
    if n < record.MIN_RUNS:
        raise NoiseError(
            f"--runs {n}: give {record.MIN_RUNS} or more runs (the spread of fewer says "
            "nothing), e.g. --runs 5"
        )


def start(config: RunConfig, n: int, root: Path) -> tuple[str, list[str]]:
    """Launch ``n`` runs of ``config`` one after another (one sweep); (sweep id, run ids)."""
    check_runs(n)
    return launcher.launch_sweep([config] * n, root)


def throughput(run_dir: Path) -> float | None:
    """A run's steady-state throughput in samples/s, or None."""
    summary = read_json(run_dir / SUMMARY_JSON) or {}
    steady = (summary.get("throughput") or {}).get("median")
    value = steady if steady is not None else summary.get("steady_throughput_samples_per_sec")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def finish(
    root: Path, config: RunConfig, run_ids: list[str], timeout_s: float = 3600
) -> dict[str, Any]:
    """Wait for the runs, write and return the record (runs that failed are left out of it)."""
    kept: list[tuple[str, float]] = []
    for rid in run_ids:
        state = launcher.wait(rid, root, timeout_s)
        value = throughput(Path(root) / rid) if state == SUCCEEDED else None
        if value is not None:
            kept.append((rid, value))
    if len(kept) < record.MIN_RUNS:
        raise NoiseError(
            f"only {len(kept)} of {len(run_ids)} runs ended with a throughput: see "
            f"`python -m lab status` and their logs, then measure again"
        )
    ids, values = [r for r, _ in kept], [t for _, t in kept]
    rec = record.make(config.to_dict(), ids, values, world_size(config))
    record.write(root, rec)
    return rec


def start_in_background(root: Path, runs: int, flags: list[str] | None = None) -> Path:
    """Start ``python -m lab noise --runs N [flags]`` detached; the path of its log."""
    check_runs(runs)
    for child in list(_children):
        if child.poll() is not None:
            _children.remove(child)
    log_path = Path(root) / record.NOISE_DIR / f"{stamp()}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, LAB_RUNS_DIR=str(root))
    with open(log_path, "ab") as out:
        _children.append(
            subprocess.Popen(
                [sys.executable, "-m", "lab", "noise", "--runs", str(runs), *(flags or [])],
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    return log_path
