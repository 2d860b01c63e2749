"""Starting a run again from where an earlier one stopped: ``resume(run_id)``.

A failed, stopped or lost run of the lab's trainer is resumed as a new run
with the same config and ``resume`` set to the old run's
``checkpoints/last.pt`` (the trainer's ``--resume``: it continues at the
checkpoint's step, with its optimizer state and the samples of that epoch
already seen skipped). The new run's run.json records ``resumed_from`` (its
supervisor copies it into status.json); the old run's ``resumed_by`` is
computed on read by the registry, so each status.json keeps its one writer.
Refusals are ``ResumeError`` with one line naming the fix: a live run (stop
it first), a finished one, a user's script, a run that saved no checkpoint.
``python -m lab resume RUN`` and the Live page's Resume button call it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from lab.engine import registry
from lab.engine.launch import launcher
from lab.engine.spec.run import RunConfig
from lab.runfolder import (
    FAILED,
    LAST_CHECKPOINT,
    LIVE_STATES,
    LOST,
    STOPPED,
    TRAINER,
    root_or_default,
)

RESUMABLE = (FAILED, STOPPED, LOST)


class ResumeError(ValueError):
    """The run cannot be resumed; the message says why and what to do instead."""


def resumable(record) -> str | None:
    """None when ``record`` (a ``RunRecord``) can be resumed, else why not (one line naming the
    fix)."""
    rid = record.run_id
    if record.kind != TRAINER:
        return (
            f"run {rid} is your own script: the lab resumes only its trainer's runs from their "
            "checkpoints; "
            "launch the script again with its own resume option"
        )
    if record.state in LIVE_STATES:
        return (
            f"run {rid} is {record.state}: stop it first (python -m lab stop {rid}), then resume it"
        )
    if record.state not in RESUMABLE:
        return (
            f"run {rid} is {record.state}: only a failed, stopped or lost run is resumed; "
            "launch a longer run instead"
        )
    if not (Path(record.run_dir) / LAST_CHECKPOINT).is_file():
        return (
            f"run {rid} saved no checkpoint ({LAST_CHECKPOINT} is missing: checkpoint 'none', or "
            "it ended "
            "before its first epoch did): launch it again instead"
        )
    return None


def resumed_config(record) -> RunConfig:
    """The old run's config, starting from its last checkpoint."""
    return dataclasses.replace(
        RunConfig.from_dict(record.config), resume=str(Path(record.run_dir) / LAST_CHECKPOINT)
    )


def resume(run_id: str, runs_dir: Path | None = None) -> str:
    """Launch the new run that continues ``run_id``; return its id. ``ResumeError`` when it cannot
    be."""
    root = root_or_default(runs_dir)
    record = registry.get_run(run_id, root)
    why = resumable(record)
    if why:
        raise ResumeError(why)
    return launcher.launch(resumed_config(record), root, resumed_from=record.run_id)
