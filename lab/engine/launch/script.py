"""A user's own training script as a run: ``ScriptConfig``, its checks, its command and its launch.

The second kind of run (``kind`` "script" in run.json and status.json): a
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.engine.launch import commands, environment, launcher, newrun
from lab.engine.launch import slurm_job as slurm
from lab.engine.launch.config import problems as run_problems
from lab.engine.queue import book as queue_book
from lab.engine.slurm.cmd import submit_argv
from lab.engine.spec import sweep as sweep_record
from lab.engine.spec.run import JOB_FIELDS, LOCAL, SLURM, ConfigError, RunConfig
from lab.engine.spec.run import processes as config_processes
from lab.engine.spec.run import world_size as config_world_size
from lab.engine.spec.sweep import STRONG
from lab.runfolder import (
    JOB_SBATCH,
    SCRIPT,
    TB_DIR,
    root_or_default,
)

MODULE_PREFIX = "-m "  # "-m package.module": run a module, as python -m does
RUN_DIR_ENV, TB_ENV = "LAB_RUN_DIR", "TENSORBOARD_LOGDIR"
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# What a trainer run shares with a script run; config.problems checks them for both.
_SHARED = (
    "mode",
    "gpus",
    "nproc",
    "nnodes",
    "node_rank",
    "rdzv_endpoint",
    "name",
    "tags",
    "extra_env",
    "backend",
    *JOB_FIELDS,
    "stall_after",
    "nccl_preset",
)


@dataclass(frozen=True)
class ScriptConfig:
    """A script run as the user asked for it. ``gpus`` are physical indices; empty = CPU.

    ``script`` is a path or ``-m package.module``; ``cwd`` empty means the
    script's folder; ``total_steps`` (0: unknown) only feeds the ETA.
    """

    script: str = ""
    args: tuple[str, ...] = ()
    cwd: str = ""
    mode: str = "single"
    gpus: tuple[int, ...] = ()
    nproc: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str = ""
    events_dir: str = ""
    total_steps: int = 0
    name: str = ""
    tags: tuple[str, ...] = ()
    extra_env: dict[str, str] = field(default_factory=dict)
    backend: str = (
        LOCAL  # slurm: the job's options below, as RunConfig's (lab.engine.launch.slurm_job)
    )
    partition: str = ""
    gpus_per_node: int = 0
    cpus_per_task: int = 0
    time: str = ""
    account: str = ""
    sbatch_args: tuple[str, ...] = ()
    stall_after: float = 0.0  # as RunConfig's: seconds without a new step (events) before "stalled"
    nccl_preset: str = ""  # as RunConfig's: a named set of NCCL variables (lab.engine.spec.nccl)

    kind = SCRIPT

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(
            kind=SCRIPT,
            gpus=list(self.gpus),
            tags=list(self.tags),
            args=list(self.args),
            sbatch_args=list(self.sbatch_args),
        )
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ScriptConfig":
        """The inverse of ``to_dict``; unknown keys are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        for k in ("gpus", "tags", "args", "sbatch_args"):
            if k in kw:
                kw[k] = tuple(kw[k])
        return cls(**kw)

    @property
    def module(self) -> str | None:
        """The module name of ``-m package.module``, else None."""
        return (
            self.script[len(MODULE_PREFIX) :].strip()
            if self.script.startswith(MODULE_PREFIX)
            else None
        )

    @property
    def sweep_stem(self) -> str:
        """As ``RunConfig.sweep_stem``: from the script's file or module."""
        return f"cmp-{stem(self)}"

    @property
    def processes(self) -> int:
        return config_processes(self)

    @property
    def world_size(self) -> int:
        return config_world_size(self)

    def work_dir(self) -> Path:
        """Where the script runs: ``cwd``, else the script's folder (a module: the current
        folder)."""
        if self.cwd.strip():
            return Path(self.cwd.strip()).expanduser()
        return (
            Path.cwd() if self.module is not None else Path(self.script.strip()).expanduser().parent
        )


def _script_problems(c: ScriptConfig) -> list[ConfigError]:
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


def _folder_problems(c: ScriptConfig) -> list[ConfigError]:
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


def problems(config: ScriptConfig, gpu_count: int) -> list[ConfigError]:
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
    shared = RunConfig(**{k: getattr(c, k) for k in _SHARED}, dataset="synthetic")
    out += [e for e in run_problems(shared, gpu_count) if e.field in _SHARED]
    return out


def validate(config: ScriptConfig, gpu_count: int) -> None:
    """Raise the first ``ConfigError`` of ``problems``."""
    found = problems(config, gpu_count)
    if found:
        raise found[0]


def normalized(config: ScriptConfig) -> ScriptConfig:
    """Paths made absolute and the working directory filled in (the run starts elsewhere)."""
    c = config
    script = (
        c.script.strip()
        if c.module is not None
        else str(Path(c.script.strip()).expanduser().resolve())
    )
    events = str(Path(c.events_dir.strip()).expanduser().resolve()) if c.events_dir.strip() else ""
    return dataclasses.replace(c, script=script, cwd=str(c.work_dir().resolve()), events_dir=events)


def _target(c: ScriptConfig) -> list[str]:
    """What python (or torchrun) is given to run: the file or ``-m module``, then the script's
    arguments."""
    if c.module is not None:
        return ["-m", c.module, *c.args]
    return [c.script, *c.args]


def build_command(
    config: ScriptConfig,
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
        return commands.torchrun(config, run_dir, port, config.node_rank) + _target(config), env  # type: ignore[arg-type]
    return [sys.executable, *_target(config)], env


def job_script(config: ScriptConfig, run_dir: Path) -> str:
    """A Slurm script run's job.sbatch: the script and its arguments on every node of the job, in
    the config's working directory, with the environment a local script run gets (``script_env``,
    GPUs left to Slurm)."""
    env = script_env(config, run_dir, None, os.environ.get("PYTHONPATH"))
    return slurm.script_sbatch(config, run_dir, _target(config), config.work_dir(), env=env)  # type: ignore[arg-type]


def script_env(
    config: ScriptConfig,
    run_dir: Path,
    cores: int | None = None,
    base_pythonpath: str | None = None,
) -> dict[str, str]:
    """Only the variables the lab sets for a script (what run.json records)."""
    env = environment.run_env(config, run_dir, cores, base_pythonpath)  # type: ignore[arg-type]
    # theirs, not the lab's: our packages must not shadow their modules
    env["PYTHONPATH"] = base_pythonpath or ""
    env[RUN_DIR_ENV] = str(run_dir)
    env[TB_ENV] = str(Path(run_dir) / TB_DIR)
    env.update(config.extra_env or {})
    return env


def other_node_commands(config: ScriptConfig, run_dir: Path) -> list[list[str]]:
    """The exact command to start on each other node, with the same GPU environment first (as the
    trainer's)."""
    # Slurm starts every node itself
    if config.mode != "ddp" or config.nnodes <= 1 or config.backend == SLURM:
        return []
    env = ["env"] + [f"{k}={v}" for k, v in environment.other_node_env(config).items()]  # type: ignore[arg-type]
    return [
        env + commands.torchrun(config, run_dir, 0, r) + _target(config)  # type: ignore[arg-type]
        for r in range(config.nnodes)
        if r != config.node_rank
    ]


SCRIPT_SCALING = (
    "a script's batch is set by its own arguments, so its sweep is strong scaling: leave the "
    "scaling at strong"
)


def stem(c: ScriptConfig) -> str:
    """A run name's stem for the script: its name, else its file's or module's."""
    raw = c.name or (c.module.rpartition(".")[2] if c.module is not None else Path(c.script).stem)
    return re.sub(r"[^A-Za-z0-9._-]", "-", raw).strip(".-")[:40] or "script"


def _new_run(c: ScriptConfig, root: Path, recorded_on: str, sweep_id: str | None = None) -> Path:
    """Create the script run's folder and its run.json (``newrun.create``)."""

    def program(run_dir: Path, port: int) -> newrun.Program:
        argv, _ = build_command(c, run_dir, port, base_env={})
        env = script_env(c, run_dir, None, os.environ.get("PYTHONPATH"))
        sbatch = job_script(c, run_dir) if c.backend == SLURM else ""
        return newrun.Program(argv, env, other_node_commands(c, run_dir), sbatch)

    return newrun.create(
        root,
        c,
        stem(c),
        program,
        recorded_on=recorded_on,
        sweep_id=sweep_id,
        kind={"kind": SCRIPT},
        where={"cwd": c.cwd},
    )


def launch(
    config: ScriptConfig,
    runs_dir: Path | None = None,
    *,
    exclusive: bool = False,
    wait_for_idle: bool = False,
) -> str:
    """Validate, create the run folder, start the supervisor; return the run id once it is up
    (``exclusive``, ``wait_for_idle``: as ``launcher.launch``'s)."""
    usable, recorded_on = newrun.machine()
    validate(config, usable)
    where = recorded_on if config.backend == LOCAL else slurm.describe(config)  # type: ignore[arg-type]
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
    configs: list[ScriptConfig], runs_dir: Path | None = None, *, scaling: str = STRONG
) -> tuple[str, list[str]]:
    """Run the script under each config one after another, as ``launcher.launch_sweep`` runs the
    trainer's: every config checked first (nothing starts when one is refused), one supervisor.
    Strong scaling only: the script's batch is its own arguments'."""
    if not configs:
        raise ValueError("a sweep needs at least one config")
    if scaling != STRONG:
        raise ConfigError("scaling", SCRIPT_SCALING)
    if any(c.backend != LOCAL for c in configs):
        raise ConfigError(
            "backend", "a sweep runs on this machine: launch each mode as its own Slurm run"
        )
    usable, recorded_on = newrun.machine()
    for i, c in enumerate(configs):
        found = problems(c, usable)
        if found:
            raise ConfigError(found[0].field, f"run {i + 1} ({c.mode}): {found[0].message}")
    root = root_or_default(runs_dir)
    sweep_id = sweep_record.new_id()
    run_ids = [_new_run(normalized(c), root, recorded_on, sweep_id).name for c in configs]
    launcher.start_sweep(root, sweep_id, run_ids, STRONG)
    return sweep_id, run_ids
