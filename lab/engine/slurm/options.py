"""The Slurm job's options on a ``RunConfig`` and their checks.

``config_problems`` refuses an unknown backend, a job option without ``backend slurm``, and a
Slurm job's bad options (names, time limit, GPUs per node, ``#SBATCH`` lines the lab writes
itself), each naming the fix. The job script built from them is ``lab.engine.launch.slurm_job``.
"""

from __future__ import annotations

import re

from lab.engine.spec import modes
from lab.engine.spec.backends import BACKENDS, LOCAL
from lab.engine.spec.run import JOB_FIELDS, ConfigError, RunConfig

_WORD = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_TIME = re.compile(r"^(\d+(:\d{1,2}){0,2}|\d+-\d+(:\d{1,2}){0,2}|unlimited|infinite)$", re.I)
# sbatch options the lab writes itself, and the field to use instead (None: the run folder depends
# on it)
_OWN = {
    "--nodes": "nnodes",
    "-N": "nnodes",
    "--partition": "partition",
    "-p": "partition",
    "--time": "time",
    "-t": "time",
    "--account": "account",
    "-A": "account",
    "--gpus-per-node": "gpus_per_node",
    "--cpus-per-task": "cpus_per_task",
    "-c": "cpus_per_task",
    "--output": None,
    "-o": None,
    "--error": None,
    "-e": None,
    "--open-mode": None,
    "--job-name": None,
    "-J": None,
    "--ntasks": None,
    "-n": None,
    "--ntasks-per-node": None,
    "--chdir": None,
    "-D": None,
    "--wrap": None,
    "--parsable": None,
}


def _sbatch_arg_problem(arg: object) -> ConfigError | None:
    if not isinstance(arg, str) or not arg.strip().startswith("-") or "\n" in arg or "\0" in arg:
        return ConfigError(
            "sbatch_args", f"{arg!r} is not one sbatch option: give one per line, e.g. --qos=high"
        )
    arg = arg.strip()
    name = arg.split("=", 1)[0].split()[0] if arg.startswith("--") else arg[:2]
    if name in _OWN:
        instead = _OWN[name]
        fix = (
            f"use {instead} instead"
            if instead
            else "the lab sets it (the run folder depends on it): leave it out"
        )
        return ConfigError("sbatch_args", f"{name} is written by the lab: {fix}")
    return None


def _slurm_problems(c: RunConfig) -> list[ConfigError]:
    out: list[ConfigError] = []

    def need(ok: bool, fld: str, msg: str) -> None:
        if not ok:
            out.append(ConfigError(fld, msg))

    need(
        not c.gpus,
        "gpus",
        "a Slurm job gets its GPUs from Slurm: leave gpus empty and use gpus_per_node",
    )
    need(
        c.node_rank == 0,
        "node_rank",
        "Slurm starts every node of the job itself: leave node_rank 0",
    )
    need(
        not c.rdzv_endpoint,
        "rdzv_endpoint",
        "the job meets on its first node by itself: leave rdzv_endpoint empty",
    )
    for fld in ("partition", "account"):
        v = getattr(c, fld)
        need(
            isinstance(v, str) and (not v or bool(_WORD.match(v))),
            fld,
            f"{fld} {v!r} is not a Slurm name: use letters, digits, '.', '_' or '-' (see sinfo)",
        )
    need(
        isinstance(c.time, str) and (not c.time or bool(_TIME.match(c.time))),
        "time",
        f"time {c.time!r} is not a Slurm time limit: use minutes (30), H:MM:SS (2:00:00) or D-HH "
        "(1-12)",
    )
    for fld in ("gpus_per_node", "cpus_per_task"):
        v = getattr(c, fld)
        need(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0,
            fld,
            f"{fld} {v!r} must be 0 or more",
        )
    if out:
        return out
    g = c.gpus_per_node
    need(
        not (c.mode == "single" and g > 1),
        "gpus_per_node",
        f"single mode uses one device, {g} GPUs per node asked: use gpus_per_node 1, or mode "
        "dp, ddp or fsdp",
    )
    need(
        not (modes.torchrun(c.mode) and g and c.nproc != g),
        "nproc",
        f"{c.mode} runs one process per GPU: gpus_per_node {g}, so use nproc {g}",
    )
    out += [p for p in map(_sbatch_arg_problem, c.sbatch_args) if p]
    return out


def config_problems(config: RunConfig) -> list[ConfigError]:
    """The backend's problems: an unknown one, a job option without Slurm, or a Slurm job's bad
    options."""
    c = config
    if c.backend not in BACKENDS:
        return [
            ConfigError("backend", f"unknown backend {c.backend!r}: use {' or '.join(BACKENDS)}")
        ]
    if c.backend == LOCAL:
        defaults = RunConfig()
        return [
            ConfigError(f, f"{f} is an option of a Slurm job: add backend slurm, or leave it out")
            for f in JOB_FIELDS
            if getattr(c, f) != getattr(defaults, f)
        ]
    return _slurm_problems(c)
