"""A sweep's runs, one after another: every config checked before anything starts, then on this
machine one supervisor over all their folders (``launcher.start_sweep``), or on Slurm one job per
run, each submitted to start after the previous one ended. ``sweep_of`` is the one sweep of both
kinds of run (a trainer's, ``launch_sweep``; a user's script, ``lab.engine.launch.script``), given
the two steps that differ: a config's problems and making its run folder. ``stop_sweep`` stops
the running member and cancels the rest.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from lab.engine import registry
from lab.engine.launch import launcher, newrun
from lab.engine.launch import slurm_job as slurm
from lab.engine.launch.config import normalized, problems
from lab.engine.preflight.checks import machine_facts
from lab.engine.spec import sweep as sweep_record
from lab.engine.spec.run import SLURM, ConfigError, RunConfig
from lab.engine.spec.sweep import SCALINGS
from lab.runfolder import QUEUED, root_or_default


def launch_sweep(
    configs: list[RunConfig],
    runs_dir: Path | None = None,
    *,
    scaling: str | list[str | None] | None = None,
    varied: list[dict[str, Any] | None] | None = None,
) -> tuple[str, list[str]]:
    """Run ``configs`` one after another under one background supervisor.

    ``varied`` (one per config, ``lab.engine.sweep.vary.varied``): what a knob sweep varies, and
    each run's values, recorded in its run.json.
    ``scaling`` (``sweeps.SCALINGS``, one for all or one per config) is what the
    configs were made under (``sweeps.compare_modes_configs``); each run.json
    records its own, for the Compare page to label and compute efficiency by.
    """

    def make(c: RunConfig, root: Path, sweep_id: str, where: str, sc: str | None, v: Any) -> str:
        return launcher.new_run(normalized(c), root, sweep_id, where, sc, varied=v)

    def check(c: RunConfig, usable: tuple[int, ...]) -> list[ConfigError]:
        return problems(c, usable, machine_facts(c))

    return sweep_of(configs, runs_dir, check, make, scaling, varied)


# a sweep's two steps that depend on the kind of run (a trainer's or a user's script): a config's
# problems on the machine's usable GPUs, and making its run folder (config, runs root, sweep id,
# where it runs, its scaling, what a knob sweep varied) -> run id
Check = Callable[[Any, tuple[int, ...]], list[ConfigError]]
Make = Callable[[Any, Path, str, str, "str | None", "dict[str, Any] | None"], str]


def sweep_of(
    configs: list[Any],
    runs_dir: Path | None,
    check: Check,
    make: Make,
    scaling: str | list[str | None] | None,
    varied: list[dict[str, Any] | None] | None = None,
) -> tuple[str, list[str]]:
    """The sweep of either kind of run: every config checked first (nothing starts when one is
    refused), then on this machine every folder made and one supervisor started over them, or on
    Slurm one job after another (``_slurm_sweep``)."""
    if not configs:
        raise ValueError("a sweep needs at least one config")
    scalings = list(scaling) if isinstance(scaling, (list, tuple)) else [scaling] * len(configs)
    if len(scalings) != len(configs) or not set(scalings) <= set(SCALINGS) | {None}:
        raise ValueError(
            f"scaling {scaling!r}: give one of {SCALINGS} for all the configs or one per config"
        )
    varied = list(varied) if varied is not None else [None] * len(configs)
    if len(varied) != len(configs):
        raise ValueError("varied: give one per config")
    if len({c.backend for c in configs}) > 1:
        raise ConfigError("backend", "a sweep runs all on this machine or all on Slurm: not both")
    usable, recorded_on = newrun.machine()
    for i, c in enumerate(configs):
        found = check(c, usable)
        if found:
            raise type(found[0])(found[0].field, f"run {i + 1} ({c.mode}): {found[0].message}")
    root = root_or_default(runs_dir)
    sweep_id = sweep_record.new_id()
    if configs[0].backend == SLURM:
        return sweep_id, _slurm_sweep(configs, make, root, sweep_id, scaling, scalings, varied)
    run_ids = [
        make(c, root, sweep_id, recorded_on, sc, v) for c, sc, v in zip(configs, scalings, varied)
    ]
    launcher.start_sweep(root, sweep_id, run_ids, scaling)
    return sweep_id, run_ids


def _slurm_sweep(
    configs: list[Any],
    make: Make,
    root: Path,
    sweep_id: str,
    scaling: Any,
    scalings: list,
    varied: list,
) -> list[str]:
    """One Slurm job per run, each submitted to start after the previous one ended
    (``--dependency=afterany:<job id>``, kept in the run's sbatch_args), each with its own
    watcher; a submission that fails stops the jobs submitted before it."""
    run_ids: list[str] = []
    previous = None
    try:
        for c, sc, v in zip(configs, scalings, varied):
            if previous:
                after = f"--dependency=afterany:{previous}"
                c = dataclasses.replace(c, sbatch_args=(*c.sbatch_args, after))
            run_ids.append(make(c, root, sweep_id, slurm.describe(c), sc, v))
            sweep_record.write(root, sweep_id, run_ids, scaling)  # stop_sweep finds them all
            launcher.start_supervisor(root / run_ids[-1])
            previous = (registry.status(root / run_ids[-1]).get("slurm") or {}).get("job_id")
            if not previous:
                raise launcher.LaunchError(
                    f"run {run_ids[-1]} was not submitted: see its supervisor.log"
                )
    except Exception:
        stop_sweep(sweep_id, root)
        raise
    return run_ids


def stop_sweep(sweep_id: str, runs_dir: Path | None = None, grace_s: float = 5) -> dict[str, str]:
    """Stop the running member of a sweep and cancel the rest; return run_id -> final state."""
    root = root_or_default(runs_dir)
    sweep = sweep_record.read(root, sweep_id)
    if not sweep:
        raise KeyError(f"no sweep {sweep_id!r} in {root}")
    run_ids = list(sweep.get("run_ids") or [])
    for rid in run_ids:  # queued first, so the supervisor never starts them
        if registry.status(root / rid).get("state") == QUEUED:
            launcher.request_stop(root / rid, grace_s)
    return {rid: launcher.stop(rid, root, grace_s) for rid in run_ids}
