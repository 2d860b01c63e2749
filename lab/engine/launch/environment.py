"""The environment a run's processes get: what the launcher sets, and what another node's command
sets.

GPUs are named by UUID in ``CUDA_VISIBLE_DEVICES`` (NVML's index "may not
correlate with the CUDA device index"), ``OMP_NUM_THREADS`` shares out the
cores, ``TORCHELASTIC_ERROR_FILE`` catches a failing rank's traceback, and
``PYTHONPATH`` reaches this repository (a user's script keeps the caller's own instead, and gets
``LAB_RUN_DIR`` and ``TENSORBOARD_LOGDIR=<run>/tb`` for scripts that read them); an NCCL preset's
variables
(``lab.engine.spec.nccl``) come before the user's own, which win. A
Slurm job's GPUs are Slurm's to set (no ``CUDA_VISIBLE_DEVICES``), its
threads its CPUs per task shared out.
Pure but for reading GPU UUIDs from
``lab.engine.devices.nvml`` when none are given. Used by ``lab.engine.launch.commands`` (both kinds
of run), the launcher and pre-flight.
"""

from __future__ import annotations

import os
from pathlib import Path

from lab.engine.devices import nvml as devices
from lab.engine.spec import backends, nccl
from lab.engine.spec.run import RunConfig, omp_threads
from lab.runfolder import ERROR_JSON, REPO_ROOT, SCRIPT, TB_DIR

RUN_DIR_ENV, TB_ENV = "LAB_RUN_DIR", "TENSORBOARD_LOGDIR"  # what a user's script may read


def visible_devices(gpus: tuple[int, ...], uuids: dict[int, str] | None = None) -> str:
    """CUDA_VISIBLE_DEVICES for NVML's GPU indices: their UUIDs (read unless given), since NVML's
    index "may not correlate with the CUDA device index"; an unreadable UUID keeps its index
    (CUDA_DEVICE_ORDER=PCI_BUS_ID)."""
    known = devices.uuids(tuple(gpus)) if uuids is None and gpus else (uuids or {})
    return ",".join(known.get(g) or str(g) for g in gpus)


def run_env(
    config: RunConfig,
    run_dir: Path,
    cores: int | None = None,
    base_pythonpath: str | None = None,
    uuids: dict[int, str] | None = None,
) -> dict[str, str]:
    """Only the variables the launcher sets (what run.json records); GPUs by UUID
    (``visible_devices``). ``base_pythonpath`` is the caller's: the lab's trainer gets this
    repository before it, a user's script only it (our packages must not shadow their modules)."""
    pp = str(REPO_ROOT) + (os.pathsep + base_pythonpath if base_pythonpath else "")
    env = {  # a run placed from elsewhere (a Slurm job) gets its GPUs there (Slurm sets them)
        **(
            {"CUDA_VISIBLE_DEVICES": visible_devices(config.gpus, uuids)}
            if backends.of(config).runs_here
            else {}
        ),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "OMP_NUM_THREADS": str(omp_threads(config, cores)),
        "PYTHONUNBUFFERED": "1",
        "TORCHELASTIC_ERROR_FILE": str(Path(run_dir) / ERROR_JSON),
        "PYTHONPATH": pp,
    }
    if config.kind == SCRIPT:
        env["PYTHONPATH"] = base_pythonpath or ""
        env[RUN_DIR_ENV] = str(run_dir)
        env[TB_ENV] = str(Path(run_dir) / TB_DIR)
    # a preset's variables (debug: its log file in the run folder); the user's own win
    env.update(nccl.preset_env(config.nccl_preset, run_dir))
    env.update(config.extra_env or {})
    return env


def other_node_env(config: RunConfig) -> dict[str, str]:
    """What another node's command sets: the same GPUs by index (their UUIDs differ from ours, so
    CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA count as NVML does) and the user's extra variables."""
    return {
        "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in config.gpus),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        **nccl.preset_env(config.nccl_preset),
        **(config.extra_env or {}),
    }
