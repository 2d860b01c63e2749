"""A user's own training script as a run: its checks, its command and its launch.

The second kind of run (a ``RunConfig`` of ``kind`` "script", as in run.json and status.json): a
``.py`` file or ``-m package.module``, its own arguments, a working
directory (default: the script's folder; a module's: the current one) and a
mode. ``single`` runs ``python script.py ARGS`` with one device visible,
``dp`` the same with every chosen GPU in ``CUDA_VISIBLE_DEVICES`` (the script
wraps its own ``nn.DataParallel``), ``ddp`` runs it under torchrun exactly as
the trainer is run (a free port per job, ``--log-dir``/``--tee 3`` for the
per-rank logs, the c10d rendezvous over nodes). The environment is the
trainer's (``environment.run_env``: devices, ``TORCHELASTIC_ERROR_FILE``, threads)
plus ``LAB_RUN_DIR`` and ``TENSORBOARD_LOGDIR=<run>/tb`` for scripts that read
them, with the user's own ``PYTHONPATH`` (the lab's would shadow their
modules). ``problems`` refuses, before anything starts, a missing script, a
file that is not Python, a missing working directory, and every device,
node, name, environment and Slurm problem a trainer run would have (checked
by ``config.problems`` itself). ``launch`` writes run.json and starts the same
supervisor as the trainer's. With ``backend`` slurm the script runs as a
Slurm job instead (``job_script``: ``lab.engine.launch.slurm_job.script_sbatch`` in the
working directory, with this environment less the GPUs, which are Slurm's),
written to the run folder as job.sbatch and submitted and followed by
``lab.engine.supervise.slurm_watch``, which links the event folders as the local
supervisor does.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from pathlib import Path
from typing import Any

from lab.engine.launch import commands, environment, launcher, newrun, sweeps
from lab.engine.launch import slurm_job as slurm
from lab.engine.launch.config import problems as run_problems
from lab.engine.queue import book as queue_book
from lab.engine.slurm.cmd import submit_argv
from lab.engine.spec.run import LOCAL, PLACEMENT, SLURM, ConfigError, RunConfig, script_stem
from lab.engine.spec.sweep import STRONG
from lab.runfolder import (
    JOB_SBATCH,
    SCRIPT,
    TB_DIR,
    root_or_default,
)

RUN_DIR_ENV, TB_ENV = "LAB_RUN_DIR", "TENSORBOARD_LOGDIR"
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


def problems(config: RunConfig, gpu_count: int) -> list[ConfigError]:
    """Every problem with ``config`` on a machine with ``gpu_count`` GPUs; empty = fine."""
    c = config
    out = _script_problems(c) + _folder_problems(c)
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


def _target(c: RunConfig) -> list[str]:
    """What python (or torchrun) is given to run: the file or ``-m module``, then the script's
    arguments."""
    if c.module is not None:
        return ["-m", c.module, *c.args]
    return [c.script, *c.args]


def build_command(
    config: RunConfig,
    run_dir: Path,
    port: int | str,
    *,
    base_env: dict[str, str] | None = None,
    cores: int | None = None,
) -> tuple[list[str], dict[str, str]]:
    """(argv, env) for this node; env = ``base_env`` (default os.environ) plus what the lab sets."""
    run_dir = Path(run_dir)
    base = dict(os.environ if base_env is None else base_env)
    env = base | script_env(config, run_dir, cores, base.get("PYTHONPATH"))
    # what runs here is the submission; job.sbatch sets the job's environment
    if config.backend == SLURM:
        return submit_argv(run_dir / JOB_SBATCH), base
    if config.mode == "ddp":
        return commands.torchrun(config, run_dir, port, config.node_rank) + _target(config), env
    return [sys.executable, *_target(config)], env


def job_script(config: RunConfig, run_dir: Path) -> str:
    """A Slurm script run's job.sbatch: the script and its arguments on every node of the job, in
    the config's working directory, with the environment a local script run gets (``script_env``,
    GPUs left to Slurm)."""
    env = script_env(config, run_dir, None, os.environ.get("PYTHONPATH"))
    return slurm.script_sbatch(config, run_dir, _target(config), config.work_dir(), env=env)


def script_env(
    config: RunConfig,
    run_dir: Path,
    cores: int | None = None,
    base_pythonpath: str | None = None,
) -> dict[str, str]:
    """Only the variables the lab sets for a script (what run.json records)."""
    env = environment.run_env(config, run_dir, cores, base_pythonpath)
    # theirs, not the lab's: our packages must not shadow their modules
    env["PYTHONPATH"] = base_pythonpath or ""
    env[RUN_DIR_ENV] = str(run_dir)
    env[TB_ENV] = str(Path(run_dir) / TB_DIR)
    env.update(config.extra_env or {})
    return env


def other_node_commands(config: RunConfig, run_dir: Path) -> list[list[str]]:
    """The exact command to start on each other node, with the same GPU environment first (as the
    trainer's)."""
    # Slurm starts every node itself
    if config.mode != "ddp" or config.nnodes <= 1 or config.backend == SLURM:
        return []
    env = ["env"] + [f"{k}={v}" for k, v in environment.other_node_env(config).items()]
    return [
        env + commands.torchrun(config, run_dir, 0, r) + _target(config)
        for r in range(config.nnodes)
        if r != config.node_rank
    ]


SCRIPT_SCALING = (
    "a script's batch is set by its own arguments, so its sweep is strong scaling: leave the "
    "scaling at strong"
)


def _new_run(
    c: RunConfig,
    root: Path,
    recorded_on: str,
    sweep_id: str | None = None,
    varied: dict[str, Any] | None = None,
) -> Path:
    """Create the script run's folder and its run.json (``newrun.create``); ``varied`` as the
    trainer's (run.json's, only in a sweep that varies something)."""

    def program(run_dir: Path, port: int) -> newrun.Program:
        argv, _ = build_command(c, run_dir, port, base_env={})
        env = script_env(c, run_dir, None, os.environ.get("PYTHONPATH"))
        sbatch = job_script(c, run_dir) if c.backend == SLURM else ""
        return newrun.Program(argv, env, other_node_commands(c, run_dir), sbatch)

    return newrun.create(
        root,
        c,
        script_stem(c),
        program,
        recorded_on=recorded_on,
        sweep_id=sweep_id,
        kind={"kind": SCRIPT},
        where={"cwd": c.cwd},
        after=None if varied is None else {"varied": varied},
    )


def launch(
    config: RunConfig,
    runs_dir: Path | None = None,
    *,
    exclusive: bool = False,
    wait_for_idle: bool = False,
) -> str:
    """Validate, create the run folder, start the supervisor; return the run id once it is up
    (``exclusive``, ``wait_for_idle``: as ``launcher.launch``'s)."""
    usable, recorded_on = newrun.machine()
    validate(config, usable)
    where = recorded_on if config.backend == LOCAL else slurm.describe(config)
    run_dir = _new_run(normalized(config), root_or_default(runs_dir), where)
    if exclusive:
        queue_book.ask_exclusive(run_dir)
    if wait_for_idle:
        queue_book.ask_idle(run_dir)
    launcher.start_supervisor(
        run_dir
    )  # a Slurm run: lab.engine.supervise.slurm_watch submits job.sbatch
    return run_dir.name


def launch_sweep(
    configs: list[RunConfig],
    runs_dir: Path | None = None,
    *,
    scaling: str = STRONG,
    varied: list[dict[str, Any] | None] | None = None,
) -> tuple[str, list[str]]:
    """Run the script under each config one after another, as ``sweeps.launch_sweep`` runs the
    trainer's (``sweeps.sweep_of``: every config checked first, nothing starts when one is
    refused; on this machine one supervisor, on Slurm one job after another). Strong scaling only:
    the script's batch is its own arguments'. ``varied``: what a sweep over the script's own flags
    varies and this run's values (``lab.engine.sweep.vary``), kept in run.json."""
    if scaling != STRONG:
        raise ConfigError("scaling", SCRIPT_SCALING)

    def make(c: RunConfig, root: Path, sweep_id: str, where: str, _sc: Any, v: Any) -> str:
        return _new_run(normalized(c), root, where, sweep_id, varied=v).name

    return sweeps.sweep_of(configs, runs_dir, problems, make, STRONG, varied)
