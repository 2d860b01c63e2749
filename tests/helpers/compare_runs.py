"""Run folders for the comparison's tests, written in the contract's shape (run.json, status.json,
summary.json) so every expected number is known exactly, and loaded the way the Compare page and
the CLI load them (the registry's records); runs with a throughput interval and an interference
record for the noise tests."""

from __future__ import annotations

import json
from pathlib import Path

from lab.engine import registry
from lab.views.compare import runs as compare_runs


def load_runs(root: Path, sample: bool = False) -> list[compare_runs.CompareRun]:
    """The runs under ``root`` as the page and the CLI pass them: the registry's records."""
    return [
        compare_runs.from_record(r, sample=sample)
        for r in compare_runs.comparable(registry.list_runs(root))
    ]


def sample_sweep(runs: list, stem: str) -> list:
    """The sample runs of one shipped sweep, by its run names' stem: ``sample`` (Compare modes:
    single, DP, DDP) or ``scaling`` (device counts: single, DDP at 1 and 2 processes)."""
    return [r for r in runs if r.sample and r.name.startswith(f"{stem}-")]


def load_run(run_dir: Path, sample: bool = False) -> compare_runs.CompareRun | None:
    """One run folder's run, as the CLI finds it; None when it holds none."""
    try:
        record = registry.get_run(run_dir.name, run_dir.parent)
    except registry.RunNotFound:
        return None
    return compare_runs.from_record(record, sample=sample)


def available_runs(user: Path, sample: Path) -> list[compare_runs.CompareRun]:
    """What the Compare page offers: the registry's records of both folders, and foreign logs."""
    return compare_runs.available_runs(registry.list_runs(user), registry.list_runs(sample), user)


def make_run(
    root: Path,
    run_id: str,
    *,
    mode: str = "single",
    effective_mode: str | None = None,
    devices=("cuda0",),
    throughput: float = 1000.0,
    peaks=None,
    batch: int = 64,
    seed: int = 0,
    model: str = "tinycnn",
    dataset: str = "digits",
    amp: bool = False,
    sweep_id: str | None = None,
    created_at: str = "2026-11-29T07:00:00+00:00",
    host: str = "box",
    summary: bool = True,
    reason: str | None = None,
    state: str | None = None,
) -> Path:
    d = root / run_id
    d.mkdir(parents=True)
    config = {
        "mode": mode,
        "model": model,
        "dataset": dataset,
        "batch_size": batch,
        "seed": seed,
        "amp": amp,
    }
    (d / "run.json").write_text(
        json.dumps(
            {
                "run_id": run_id,
                "name": run_id,
                "config": config,
                "created_at": created_at,
                "host": host,
                "sweep_id": sweep_id,
                "recorded_on": f"test, {host}",
            }
        )
    )
    # The supervisor's record: ended well with a summary, else failed before writing one.
    (d / "status.json").write_text(
        json.dumps({"state": state or ("succeeded" if summary else "failed")})
    )
    if summary:
        ws = len(devices) if mode == "ddp" else 1
        (d / "summary.json").write_text(
            json.dumps(
                {
                    "config": config,
                    "mode": mode,
                    "effective_mode": effective_mode or mode,
                    "effective_mode_reason": reason,
                    "world_size": ws,
                    "devices": list(devices),
                    "global_batch": batch,
                    "per_device_batch": batch // ws,
                    "steps": 100,
                    "steady_throughput_samples_per_sec": throughput,
                    "throughput_samples_per_sec": throughput * 0.9,
                    "epoch_time_s": 6400 / throughput,
                    "peak_mem_mib": peaks or {dv: 500.0 for dv in devices},
                    "final": {
                        "train_loss": 0.25,
                        "train_acc": 0.9,
                        "val_loss": 0.3,
                        "val_acc": 0.875,
                    },
                    "amp": amp,
                    "hostname": host,
                    "started_at": created_at,
                    "completed": True,
                }
            )
        )
    return d


BUSY = {
    "busy": True,
    "reasons": ["other processes kept 1.2 of the 2 cores busy on average"],
    "other_cpu_cores_mean": 1.2,
    "busy_fraction": 0.6,
    "samples": 30,
    "foreign_gpu_processes": [],
    "gpu_note": None,
}
QUIET = dict(BUSY, busy=False, reasons=[], other_cpu_cores_mean=0.01, busy_fraction=0.0)


def spread_run(
    root: Path,
    run_id: str,
    median: float,
    lo: float,
    hi: float,
    *,
    windows: int = 20,
    interference: dict | None = None,
    **kw,
) -> Path:
    """A run whose summary.json carries ``throughput`` and whose status.json carries
    ``interference``."""
    d = make_run(root, run_id, throughput=median, **kw)
    s = json.loads((d / "summary.json").read_text())
    s["throughput"] = {"median": median, "ci_low": lo, "ci_high": hi, "windows": windows}
    (d / "summary.json").write_text(json.dumps(s))
    if interference is not None:
        st = json.loads((d / "status.json").read_text())
        (d / "status.json").write_text(json.dumps(dict(st, interference=interference)))
    return d
