"""A user's own training script as a run: what is checked before it starts, and its paths.

The second kind of run (a ``RunConfig`` of ``kind`` "script", as in run.json and status.json): a
``.py`` file or ``-m package.module``, its own arguments, a working directory (default: the
script's folder; a module's: the current one) and a mode. Its command is
``lab.engine.launch.commands``' (``program``: the script where the trainer would be; python, or
torchrun for ddp, in front), its environment ``environment.run_env``'s (with the caller's own
``PYTHONPATH``, ``LAB_RUN_DIR`` and ``TENSORBOARD_LOGDIR``), its Slurm job script
``slurm_job.build_sbatch``'s (run in its working directory), its launch ``launcher.launch`` and
``sweeps.launch_sweep``, as a trainer run's. ``problems`` refuses, before anything starts, a
missing script, a file that is not Python, a missing working directory, and every device, node,
name, environment and Slurm problem a trainer run would have (checked by ``config.problems``
itself); ``normalized`` makes its paths absolute.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from lab.engine.launch.config import problems as run_problems
from lab.engine.spec.modes import FSDP
from lab.engine.spec.run import PLACEMENT, ConfigError, RunConfig

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _script_problems(c: RunConfig) -> list[ConfigError]:
    fix = "give the path of your training script (a .py file), or -m package.module"
    if not isinstance(c.script, str) or not c.script.strip():
        return [ConfigError("script", f"no script given: {fix}")]
    if c.module is not None:
        if not _MODULE.match(c.module):
            return [
                ConfigError(
                    "script",
                    f"{c.module!r} is not a module name: use -m package.module, e.g. -m "
                    "mypkg.train",
                )
            ]
        return []
    path = Path(c.script.strip()).expanduser()
    if not path.exists():
        return [ConfigError("script", f"{str(path)!r} does not exist: {fix}")]
    if path.is_dir():
        return [
            ConfigError(
                "script",
                f"{str(path)!r} is a folder: give the .py file inside it, or -m package.module",
            )
        ]
    if path.suffix != ".py":
        return [ConfigError("script", f"{str(path)!r} is not a Python file (.py): {fix}")]
    return []


def _folder_problems(c: RunConfig) -> list[ConfigError]:
    out: list[ConfigError] = []
    if c.cwd.strip() and not Path(c.cwd.strip()).expanduser().is_dir():
        out.append(
            ConfigError(
                "cwd",
                f"working directory {c.cwd.strip()!r} does not exist: give an existing "
                "folder, or leave it empty to run in the script's folder",
            )
        )
    if c.events_dir.strip() and Path(c.events_dir.strip()).expanduser().is_file():
        out.append(
            ConfigError(
                "events_dir",
                f"{c.events_dir.strip()!r} is a file: give the folder the script "
                "writes its event files to, or leave it empty",
            )
        )
    return out


# the lab shards the trainer's model; a script shards its own and only needs torchrun's placement
SCRIPT_FSDP = (
    "a script that uses FSDP shards its model itself: run it in mode ddp (torchrun, a process per "
    "device) and Compare reads its tags as for DDP scripts"
)


def problems(config: RunConfig, gpu_count: int) -> list[ConfigError]:
    """Every problem with ``config`` on a machine with ``gpu_count`` GPUs; empty = fine."""
    c = config
    out = _script_problems(c) + _folder_problems(c)
    if c.mode == FSDP:
        out.append(ConfigError("mode", SCRIPT_FSDP))
    if any(not isinstance(a, str) or "\0" in a for a in c.args):
        out.append(ConfigError("args", "the script's arguments must be text"))
    if not isinstance(c.total_steps, int) or isinstance(c.total_steps, bool) or c.total_steps < 0:
        out.append(
            ConfigError("total_steps", f"total steps {c.total_steps} must be 0 (unknown) or more")
        )
    # the devices, nodes, name, tags and environment are checked as a trainer run's would be; the
    # trainer's own options (batch, data, model) are not the script's, so their findings are dropped
    shared = RunConfig(**{k: getattr(c, k) for k in PLACEMENT}, dataset="synthetic")
    out += [e for e in run_problems(shared, gpu_count) if e.field in PLACEMENT]
    return out


def validate(config: RunConfig, gpu_count: int) -> None:
    """Raise the first ``ConfigError`` of ``problems``."""
    found = problems(config, gpu_count)
    if found:
        raise found[0]


def normalized(config: RunConfig) -> RunConfig:
    """Paths made absolute and the working directory filled in (the run starts elsewhere)."""
    c = config
    script = (
        c.script.strip()
        if c.module is not None
        else str(Path(c.script.strip()).expanduser().resolve())
    )
    events = str(Path(c.events_dir.strip()).expanduser().resolve()) if c.events_dir.strip() else ""
    return dataclasses.replace(c, script=script, cwd=str(c.work_dir().resolve()), events_dir=events)


SCRIPT_SCALING = (
    "a script's batch is set by its own arguments, so its sweep is strong scaling: leave the "
    "scaling at strong"
)
