"""A sweep's runs, one after another: every config checked before anything starts, then on this
machine one supervisor over all their folders (``launcher.start_sweep``), or on Slurm one job per
run, each submitted to start after the previous one ended; either kind of run, a trainer's or a
user's script (``launcher.problems_here``, ``launcher.new_run``). ``stop_sweep`` stops the running
member and cancels the rest.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from lab.engine import registry
from lab.engine.launch import backends, launcher, newrun, script
from lab.engine.spec import sweep as sweep_record
from lab.engine.spec.run import ConfigError, RunConfig
from lab.engine.spec.sweep import SCALINGS, STRONG
from lab.runfolder import QUEUED, SCRIPT, root_or_default


def launch_sweep(
    configs: list[RunConfig],
    runs_dir: Path | None = None,
    *,
    scaling: str | list[str | None] | None = None,
    varied: list[dict[str, Any] | None] | None = None,
) -> tuple[str, list[str]]:
    """Run ``configs`` (either kind of run) one after another: every config checked first
    (``launcher.problems_here``; nothing starts when one is refused), then on this machine every
    folder made and one supervisor started over them, or on Slurm one job after another.

    ``varied`` (one per config, ``lab.engine.sweep.vary.varied``): what a knob sweep varies, and
    each run's values, recorded in its run.json.
    ``scaling`` (``SCALINGS``, one for all or one per config) is what the configs were made under
    (``lab.engine.sweep.plan.compare_modes_configs``); each trainer run.json records its own, for
    the Compare page to label and compute efficiency by. A script's sweep is strong scaling only
    (its batch is its own arguments')."""
    if not configs:
        raise ValueError("a sweep needs at least one config")
    scalings = list(scaling) if isinstance(scaling, (list, tuple)) else [scaling] * len(configs)
    if len(scalings) != len(configs) or not set(scalings) <= set(SCALINGS) | {None}:
        raise ValueError(
            f"scaling {scaling!r}: give one of {SCALINGS} for all the configs or one per config"
        )
    if any(c.kind == SCRIPT for c in configs):
        if set(scalings) - {None, STRONG}:
            raise ConfigError("scaling", script.SCRIPT_SCALING)
        scaling, scalings = STRONG, [None] * len(configs)
    varied = list(varied) if varied is not None else [None] * len(configs)
    if len(varied) != len(configs):
        raise ValueError("varied: give one per config")
    if len({c.backend for c in configs}) > 1:
        raise ConfigError("backend", "a sweep runs all on this machine or all on Slurm: not both")
    usable, recorded_on = newrun.machine()
    for i, c in enumerate(configs):
        found = launcher.problems_here(c, usable)
        if found:
            raise type(found[0])(found[0].field, f"run {i + 1} ({c.mode}): {found[0].message}")
    root = root_or_default(runs_dir)
    sweep_id = sweep_record.new_id()
    # runs placed elsewhere (Slurm jobs) each have their own watcher: one job after another
    if not backends.of(configs[0]).runs_here:
        return sweep_id, _job_chain(configs, root, sweep_id, scaling, scalings, varied)
    made = zip(configs, scalings, varied)
    run_ids = [
        launcher.new_run(launcher.ready(c), root, sweep_id, recorded_on, sc, varied=v)
        for c, sc, v in made
    ]
    launcher.start_sweep(root, sweep_id, run_ids, scaling)
    return sweep_id, run_ids


def _job_chain(
    configs: list[RunConfig],
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
            where = backends.of(c).where(c, "")
            run_ids.append(launcher.new_run(launcher.ready(c), root, sweep_id, where, sc, varied=v))
            sweep_record.write(root, sweep_id, run_ids, scaling)  # stop_sweep finds them all
            launcher.start_supervisor(root / run_ids[-1])
            previous = (registry.status_record(root / run_ids[-1]).slurm or {}).get("job_id")
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
        if registry.status_record(root / rid).state == QUEUED:
            launcher.request_stop(root / rid, grace_s)
    return {rid: launcher.stop(rid, root, grace_s) for rid in run_ids}
