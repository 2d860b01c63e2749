"""What the pre-flight led to expect, kept in the run folder: ``runs/<id>/preflight.json``.

Written once at launch (``newrun.create``, for trainer and script runs alike):
``{"lines": [str, ...], "expectations": [{"key": str, "text": str}, ...]}``. ``lines`` are the
pre-flight's plain-words lines as the Launch page showed them (a trainer run on this machine; a
script or Slurm run keeps only its expectations' texts). ``expectations`` are the ones that bear on
a speedup, each a stable key and one sentence, which Compare uses as a card's reason when the run
has no profile:

- ``cores_shared``: DDP on the CPU, its processes share this machine's cores ("2 processes share 2
  cores, expect little or no speedup");
- ``dp_one_device``: DP given fewer than two GPUs runs as single, the same code path.

A failure to write it is logged, never in the way of the launch.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from lab.engine.spec import backends, modes
from lab.runfolder import PREFLIGHT, SCRIPT, read_json, read_json_kept, write_json_atomic

log = logging.getLogger(__name__)
CORES_SHARED, DP_ONE_DEVICE = "cores_shared", "dp_one_device"


def expectations(config: Any, cores: int | None = None) -> list[dict[str, str]]:
    """The expectations that bear on a speedup for ``config`` (either kind of run)."""
    cores = cores or os.cpu_count() or 1
    backend = backends.of(config)
    gpus = backend.node_gpus(config)
    out: list[dict[str, str]] = []
    # the cores shared are this machine's (a job's nodes are Slurm's to give)
    if modes.torchrun(config.mode) and not gpus and backend.runs_here:
        n = config.nproc
        out.append(
            {
                "key": CORES_SHARED,
                "text": f"{n} processes share {cores} cores, expect little or no speedup",
            }
        )
    if config.mode == "dp" and gpus < 2:
        where = "the CPU" if not gpus else "one GPU"
        out.append(
            {
                "key": DP_ONE_DEVICE,
                "text": f"DP on {where} runs as single (the same code path): expect no speedup",
            }
        )
    return out


def _lines(config: Any) -> list[str]:
    """The pre-flight's lines of a trainer run on this machine (empty for others)."""
    if config.kind == SCRIPT or not backends.of(config).runs_here:
        return []
    from lab.engine.devices import nvml as devices
    from lab.engine.preflight.checks import preflight

    return preflight(config, devices.snapshot())


def record(config: Any) -> dict[str, Any]:
    """preflight.json's content for ``config``."""
    found = expectations(config)
    try:
        lines = _lines(config)
    except Exception as e:  # noqa: BLE001 - the record is a note; the launch goes on
        log.warning("pre-flight lines not kept in preflight.json: %s", e)
        lines = []
    return {"lines": lines or [e["text"] for e in found], "expectations": found}


def write(run_dir: Path, config: Any) -> None:
    """Write ``run_dir``/preflight.json (a failure is logged, the launch goes on)."""
    try:
        write_json_atomic(Path(run_dir) / PREFLIGHT, record(config))
    except OSError as e:
        log.warning("could not write %s: %s", Path(run_dir) / PREFLIGHT, e)


def read(run_dir: Path, *, kept: bool = False) -> dict[str, Any] | None:
    """A run's preflight.json, or None (an older run, or unreadable). ``kept``: through
    ``runfolder.read_json_kept`` (a listing's read; the object is shared, never change it)."""
    return (read_json_kept if kept else read_json)(Path(run_dir) / PREFLIGHT)
