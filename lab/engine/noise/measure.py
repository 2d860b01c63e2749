"""Measuring the noise floor: one config run N times as one sweep, then the record.

``start`` launches the N identical runs as a sweep (``sweeps.launch_sweep``): one supervisor runs
them one after another, and a sweep is exclusive in the queue, so they take turns with nothing
else the lab runs. ``finish`` waits for them, reads each run's steady-state throughput
(summary.json's ``throughput`` median: its logging windows without the warm-up one) and writes
the record (``lab.engine.noise.record``). ``start_in_background`` runs ``python -m lab noise`` as
a detached process, for a page's button: the record appears when the runs have ended.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.engine.launch import launcher, sweeps
from lab.engine.noise import record
from lab.engine.spec.run import RunConfig, world_size
from lab.runfolder import SUCCEEDED, stamp
from lab.runrecords import read_summary


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
    return sweeps.launch_sweep([config] * n, root)


def throughput(run_dir: Path) -> float | None:
    """A run's steady-state throughput in samples/s, or None."""
    return read_summary(run_dir).throughput_samples_per_sec


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


def start_in_background(root: Path, runs: int, flags: list[str] | None = None) -> tuple[Path, Any]:
    """Start ``python -m lab noise --runs N [flags]`` detached (``launcher.start_command``); the
    path of its log and the process (a ``lab.engine.spawn.Popen``)."""
    check_runs(runs)
    log_path = Path(root) / record.NOISE_DIR / f"{stamp()}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    args = ["noise", "--runs", str(runs), *(flags or [])]
    return log_path, launcher.start_command(args, log_path, Path(root))
