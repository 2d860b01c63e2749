"""The command lines of a run: the trainer's arguments, torchrun's, and the (argv, env) of each
node, for both kinds of run: ``program`` is the one place where the lab's trainer and a user's
script differ (``-m training.train`` and its flags, or the script's file or ``-m module`` and its
own arguments); python or torchrun in front of it, the environment and the other nodes' commands
are the same.

``local_command`` is pure: config + run folder + port (+ the GPUs' UUIDs,
read from NVML unless given) -> (argv, env), tested exactly; argv is a list
(never a shell string) so user text stays one item. The environment is
``lab.engine.launch.environment``'s. A Slurm job's nodes are started by Slurm, so it has no
other nodes' commands; ``trainer_args`` and ``program`` are shared with its job script.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lab.engine.launch import environment
from lab.engine.launch.form import always_given, trainer_flags
from lab.engine.ports import PORT_FLAG
from lab.engine.spec import backends, modes
from lab.engine.spec.run import RunConfig
from lab.runfolder import LOGS_DIR, SCRIPT


def trainer_args(c: RunConfig, run_dir: Path) -> list[str]:
    """``-m training.train`` and its options for ``c``, writing into ``run_dir``."""
    device = "cuda" if c.gpus or c.gpus_per_node else "cpu"
    args = ["-m", "training.train", *always_given(c, {"log_dir": str(run_dir), "device": device})]
    args += trainer_flags(c)  # the options given only when set, as the form declares them
    if c.resume or c.max_restarts:  # a restarted attempt continues from its own last checkpoint
        args += ["--resume", c.resume or "auto"]
    return args


def torchrun(c: RunConfig, run_dir: Path, port: int | str, node_rank: int) -> list[str]:
    """torchrun's argv up to the program: one node on 127.0.0.1:``port``, or c10d over the nodes."""
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(c.nproc),
        "--nnodes",
        str(c.nnodes),
    ]
    if c.nnodes > 1:
        argv += [
            "--node-rank",
            str(node_rank),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            c.rdzv_endpoint,
            "--rdzv-id",
            Path(run_dir).name,
        ]
    else:
        argv += ["--master-addr", "127.0.0.1", PORT_FLAG, str(port)]
    if getattr(c, "max_restarts", 0):  # a script's config has none
        argv += ["--max-restarts", str(c.max_restarts)]
    return argv + ["--log-dir", str(Path(run_dir) / LOGS_DIR), "--tee", "3"]


def local_command(
    config: RunConfig,
    run_dir: Path,
    port: int | str,
    base: dict[str, str],
    cores: int | None = None,
    uuids: dict[int, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """(argv, env) of a run on this machine: python (torchrun for ddp and fsdp) and ``program``;
    env = ``base`` plus ``environment.run_env``. ``port`` is the single-node master port (a
    placeholder text where the command is only shown: the real one is chosen free at the start).
    Any run's command is ``lab.engine.launch.backends.build_command``'s (a Slurm run's is the
    submission of its job script)."""
    env = base | environment.run_env(config, run_dir, cores, base.get("PYTHONPATH"), uuids)
    argv = (
        torchrun(config, run_dir, port, config.node_rank)
        if modes.torchrun(config.mode)
        else [sys.executable]
    )
    return argv + program(config, run_dir), env


def program(config: RunConfig, run_dir: Path) -> list[str]:
    """What python (or torchrun) is given to run: the trainer and its options, or a user's script
    (its file or ``-m module``) and its own arguments."""
    if config.kind != SCRIPT:
        return trainer_args(config, run_dir)
    if config.module is not None:
        return ["-m", config.module, *config.args]
    return [config.script, *config.args]


def other_node_commands(config: RunConfig, run_dir: Path) -> list[list[str]]:
    """The exact command for each other node, run from the repository, with ``env`` +
    ``other_node_env`` first."""
    # a run placed from elsewhere (a Slurm job) has its nodes started for it
    if not modes.torchrun(config.mode) or config.nnodes <= 1 or not backends.of(config).runs_here:
        return []
    env = ["env"] + [f"{k}={v}" for k, v in environment.other_node_env(config).items()]
    return [
        env + torchrun(config, run_dir, 0, r) + program(config, run_dir)
        for r in range(config.nnodes)
        if r != config.node_rank
    ]
