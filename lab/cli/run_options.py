"""The run options of ``python -m lab launch`` and ``sweep``: one flag per ``RunConfig`` field.

Flags, defaults and choices come from ``RunConfig`` itself
(``lab.engine.launch.config``), so the command line cannot drift from the config;
parsed values become a config through ``lab.engine.launch.request.run_config``, as
the Launch page's form does.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from lab.engine.launch.config import BACKENDS, MODES, RunConfig
from lab.engine.launch.trainer_options import CHECKPOINTS

# How the command line differs from RunConfig's field names and defaults; the
# other fields are the trainer's options, with RunConfig's defaults.
# repeatable: one tag, KEY=VALUE, option each
FLAG = {"tags": "tag", "extra_env": "env", "sbatch_args": "sbatch_arg"}
CHOICES = {"mode": MODES, "checkpoint": CHECKPOINTS, "backend": BACKENDS}
HELP = {
    "gpus": "physical GPU numbers, e.g. 0,1; 'cpu' for none (default: all for dp/ddp, 0 for "
    "single)",
    "nproc": "ddp: processes per node (default: one per GPU, 2 on the CPU)",
    "rdzv_endpoint": "host:port of node 0 when --nnodes > 1",
    "model": "tinycnn, or any torchvision classification model: a name of "
    "torchvision.models.list_models(module=torchvision.models), e.g. resnet50, vit_b_16",
    "dataset": "digits | synthetic | imagefolder:PATH",
    "batch_size": "the global batch",
    "tags": "a tag (repeatable)",
    "extra_env": "extra environment, KEY=VALUE (repeatable)",
    "profile_steps": "A:B: torch.profiler over optimizer steps A to B-1 on every rank (e.g. "
    "20:25); off by default",
    "backend": "where to run: local (this machine) or slurm (a job on a Slurm cluster, with the "
    "options below)",
    "partition": "slurm: the partition (default: the cluster's)",
    "gpus_per_node": "slurm: GPUs per node (ddp: one process each)",
    "cpus_per_task": "slurm: CPUs per node for the task (default: Slurm's)",
    "time": "slurm: the time limit, e.g. 30 or 2:00:00 (default: the partition's)",
    "account": "slurm: the account to charge",
    "sbatch_args": "slurm: one more #SBATCH option, written --sbatch-arg=--qos=high (repeatable)",
    "stall_after": "seconds without a new step before the run is flagged stalled and its stacks "
    "saved "
    "(0: the larger of 60 s and 20 median steps)",
    "stop_on_nan": "end the run (failed, nan_loss) as soon as train/loss is NaN or infinite",
    "data_delay_ms": "each training batch waits MS: a slow input pipeline, simulated",
    "max_restarts": "ddp: torchrun restarts the workers up to N times; the trainer resumes from "
    "its last checkpoint",
    "resume": "a checkpoint file to start from (a run's checkpoints/last.pt); `python -m lab "
    "resume RUN` fills it in",
}


def add_run_options(p: argparse.ArgumentParser, with_mode: bool = True) -> None:
    """A flag per RunConfig field (its default and choices), and ``--json``."""
    for f in dataclasses.fields(RunConfig):
        if f.name == "mode" and not with_mode:
            continue
        flag = "--" + FLAG.get(f.name, f.name).replace("_", "-")
        kw: dict[str, Any] = dict(dest=f.name, help=HELP.get(f.name))
        if f.name in FLAG:
            p.add_argument(flag, action="append", default=[], metavar=FLAG[f.name].upper(), **kw)
        elif f.name in ("gpus", "nproc"):  # None: the mode's default, chosen by request.run_config
            p.add_argument(flag, type=int if f.name == "nproc" else str, **kw)
        elif isinstance(f.default, bool):
            p.add_argument(flag, action="store_true", **kw)
        else:
            p.add_argument(
                flag, type=type(f.default), default=f.default, choices=CHOICES.get(f.name), **kw
            )
    p.add_argument("--json", action="store_true", help="print JSON")


def run_config(a: argparse.Namespace, mode: str, usable: tuple[int, ...]) -> RunConfig:
    """The parsed flags as a RunConfig of ``mode``, read as the Launch form's values are; a bad one
    raises."""
    from lab.engine.launch import request

    values = {
        f.name: getattr(a, f.name) for f in dataclasses.fields(RunConfig) if hasattr(a, f.name)
    }
    config, unreadable = request.run_config(dict(values, mode=mode), usable)
    if unreadable:
        raise unreadable[0]
    return config
