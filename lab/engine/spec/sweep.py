"""A sweep: its scalings, and its record in the runs folder: ``.sweeps/<sweep_id>.json`` (its run
ids in order, the runs folder, when it was made, its scaling) beside its supervisor's ``.log``;
made by the launcher (``lab.engine.launch.sweeps.launch_sweep``), read by ``stop SWEEP`` and
``compare SWEEP``."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from lab.runfolder import SWEEPS_DIR, check_run_id, now_iso, read_json, stamp, write_json_atomic

STRONG, WEAK = "strong", "weak"
# a Compare-modes sweep keeps the global batch (strong) or the per-device batch (weak)
SCALINGS = (STRONG, WEAK)


def new_id() -> str:
    return check_run_id(f"sweep-{stamp()}-{secrets.token_hex(2)}")


def path(root: Path, sweep_id: str, suffix: str = ".json") -> Path:
    """The record (``.json``) or the supervisor's log (``.log``) of a sweep."""
    return Path(root) / SWEEPS_DIR / f"{check_run_id(sweep_id)}{suffix}"


def write(root: Path, sweep_id: str, run_ids: list[str], scaling: Any) -> Path:
    """Write (or rewrite, as runs are added) the record; return its path."""
    file = path(root, sweep_id)
    file.parent.mkdir(exist_ok=True)
    record = {
        "sweep_id": sweep_id,
        "run_ids": run_ids,
        "runs_dir": str(root),
        "created_at": now_iso(),
        "scaling": scaling,
    }
    write_json_atomic(file, record)
    return file


def read(root: Path, sweep_id: str) -> dict[str, Any]:
    """The record, or {} when there is none (or it cannot be read)."""
    return read_json(path(root, sweep_id)) or {}
