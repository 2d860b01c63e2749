"""Every check on a ``RunConfig`` made before anything starts.

``problems`` returns all ``ConfigError(field, message)`` at once, each naming the fix;
``validate`` raises the first. It gathers the config's own checks (devices, nodes, names),
the trainer's options (``lab.engine.launch.trainer_options``), the performance knobs
(``lab.engine.launch.knobs``), the model
(``lab.engine.launch.models``), the Slurm job's options (``lab.engine.launch.slurm_job``) and, given
the machine's facts, the pre-flight's refusals (``lab.engine.preflight.checks``). The value
itself is ``lab.engine.spec.run``; its names are re-exported here. Nothing here starts
a process or touches NVML: the GPUs are an argument, a count or the usable physical indices.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from lab.engine.launch import form, knobs, models, trainer_options
from lab.engine.preflight.checks import MachineFacts, refusals
from lab.engine.slurm import options as slurm
from lab.engine.spec import backends, modes
from lab.engine.spec.modes import DP, MODES, SINGLE
from lab.engine.spec.run import (
    ConfigError,
    Gpus,
    RunConfig,
    usable,
)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")
_ENDPOINT = re.compile(r"^([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\]):(\d{1,5})$")
# Chosen by the launcher from the config; a user value would silently undo it.
_RESERVED_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TORCHELASTIC_ERROR_FILE")


def _split_unit(config: RunConfig) -> str:
    if modes.torchrun(config.mode):
        return "processes" if not config.gpus or config.nnodes > 1 else "GPUs"
    return "GPUs"


def _batch_problem(config: RunConfig) -> ConfigError | None:
    world = config.world_size
    b = config.batch_size
    if world <= 1 or b % world == 0:
        return None
    lo = (b // world) * world
    hi = lo + world
    fix = f"use {lo} or {hi}" if lo > 0 else f"use {hi}"
    return ConfigError(
        "batch_size", f"batch {b} does not split over {world} {_split_unit(config)}: {fix}"
    )


def _no_such_gpu(g: int, have: tuple[int, ...]) -> ConfigError:
    if not have:
        return ConfigError(
            "gpus",
            f"GPU {g} does not exist: this machine has no GPUs: leave gpus empty to run on the CPU",
        )
    if have == tuple(range(len(have))):
        n = len(have)
        return ConfigError(
            "gpus",
            f"GPU {g} does not exist: this machine has {n} GPU{'s' if n > 1 else ''} (0-{n - 1}): "
            "pick among them",
        )
    return ConfigError(
        "gpus",
        f"GPU {g} cannot be used: the GPUs NVML can read here are {', '.join(map(str, have))}: "
        "pick among them",
    )


def _device_problems(c: RunConfig, gpus: Gpus) -> list[ConfigError]:
    out: list[ConfigError] = []
    have = usable(gpus)
    if len(set(c.gpus)) != len(c.gpus):
        out.append(
            ConfigError("gpus", f"GPU list {list(c.gpus)} repeats a GPU: name each GPU once")
        )
    # a Slurm job's GPUs are not this machine's (slurm checks)
    here = backends.of(c).runs_here
    for g in c.gpus if here else ():
        if not isinstance(g, int) or isinstance(g, bool) or g < 0:
            out.append(
                ConfigError("gpus", f"{g!r} is not a GPU index: use whole numbers such as 0,1")
            )
        elif g not in have:
            out.append(_no_such_gpu(g, have))
    # a seed's trap: DP quietly runs on the GPUs it sees
    if here and c.mode == DP and len(set(c.gpus)) > len(have):
        fix = f"pick at most {len(have)}" if have else "leave gpus empty to run on the CPU"
        out.append(
            ConfigError(
                "gpus",
                f"dp asks for {len(set(c.gpus))} GPUs but {len(have)} are visible: "
                f"DataParallel would quietly use fewer; {fix}",
            )
        )
    if c.mode == SINGLE and len(c.gpus) > 1:
        out.append(
            ConfigError(
                "gpus",
                f"single mode uses one device, {len(c.gpus)} GPUs given: pick one GPU or use "
                "dp/ddp",
            )
        )
    if modes.torchrun(c.mode):
        if not isinstance(c.nproc, int) or c.nproc < 1:
            out.append(
                ConfigError(
                    "nproc",
                    f"{c.mode} needs at least one process per node, got {c.nproc}: use nproc 1 "
                    "or more",
                )
            )
        elif c.gpus and c.nproc != len(c.gpus):
            out.append(
                ConfigError(
                    "nproc",
                    f"{c.mode} runs one process per GPU: {len(c.gpus)} GPUs given, so use nproc "
                    f"{len(c.gpus)}",
                )
            )
    elif c.nproc != 1:
        where = "on the CPU " if c.mode == DP and not c.gpus else ""
        out.append(
            ConfigError(
                "nproc",
                f"{c.mode} {where}runs in one process, nproc {c.nproc} given: use nproc 1, or "
                "mode ddp or fsdp for several processes",
            )
        )
    return out


def _node_problems(c: RunConfig) -> list[ConfigError]:
    out: list[ConfigError] = []
    if not isinstance(c.nnodes, int) or c.nnodes < 1:
        return [ConfigError("nnodes", f"nnodes must be 1 or more, got {c.nnodes}")]
    if c.nnodes > 1:
        if not modes.torchrun(c.mode):
            out.append(
                ConfigError(
                    "mode",
                    f"several nodes need mode ddp or fsdp, not {c.mode}: use one of them or "
                    "nnodes 1",
                )
            )
        m = _ENDPOINT.match(c.rdzv_endpoint or "")
        # a job finds its first node itself (lab.engine.slurm.options checks the endpoint is
        # left empty)
        placed_here = backends.of(c).runs_here
        if placed_here and not c.rdzv_endpoint:
            out.append(
                ConfigError(
                    "rdzv_endpoint",
                    f"nnodes {c.nnodes} needs a rendezvous endpoint: give host:port of node 0, "
                    "e.g. 10.0.0.1:29400",
                )
            )
        elif placed_here and (not m or not 0 < int(m.group(2)) < 65536):
            out.append(
                ConfigError(
                    "rdzv_endpoint",
                    f"{c.rdzv_endpoint!r} is not host:port: use e.g. 10.0.0.1:29400",
                )
            )
    if not isinstance(c.node_rank, int) or not 0 <= c.node_rank < c.nnodes:
        out.append(
            ConfigError(
                "node_rank",
                f"node_rank {c.node_rank} is outside 0..{c.nnodes - 1}: use a rank below nnodes",
            )
        )
    return out


def _model_problems(c: RunConfig, found: list[ConfigError]) -> list[ConfigError]:
    """The model's name (``lab.engine.launch.models``), then whether it takes the image size (when
    that is valid)."""
    unknown = models.model_problem(c.model)
    if unknown:
        return [ConfigError("model", unknown)]
    size = (
        None
        if any(e.field == "image_size" for e in found)
        else models.size_problem(c.model, c.image_size)
    )
    return [ConfigError("image_size", size)] if size else []


def problems(
    config: RunConfig, gpus: Gpus, machine: MachineFacts | None = None
) -> list[ConfigError]:
    """Every problem with ``config`` on a machine whose usable GPUs are ``gpus`` (see ``usable``)
    and ``machine``'s facts; empty = fine."""
    c = config
    out: list[ConfigError] = []
    if c.mode not in MODES:
        return [ConfigError("mode", f"unknown mode {c.mode!r}: use {', '.join(MODES)}")]
    out += _device_problems(c, gpus)
    out += _node_problems(c)
    out += [ConfigError(f, msg) for f, msg in trainer_options.number_problems(c)]
    out += [ConfigError(f, msg) for f, msg in form.limit_problems(c)]
    out += [ConfigError(f, msg) for f, msg in knobs.knob_problems(c)]
    out += slurm.config_problems(c)
    if not out:
        bp = _batch_problem(c)
        if bp:
            out.append(bp)
    out += _model_problems(c, out)
    if not isinstance(c.dataset, str):
        out.append(
            ConfigError("dataset", "dataset must be text: digits, synthetic or imagefolder:PATH")
        )
    else:
        dp = trainer_options.dataset_problem(c.dataset)
        if dp:
            out.append(ConfigError("dataset", dp))
    if c.name and not _NAME.match(c.name):
        out.append(
            ConfigError(
                "name",
                f"name {c.name!r} has characters we cannot use in a folder name: use letters, "
                "digits, '.', '_' or '-' (40 at most)",
            )
        )
    for t in c.tags:
        if not isinstance(t, str) or not t.strip() or len(t) > 40 or "," in t:
            out.append(ConfigError("tags", f"tag {t!r} must be 1-40 characters without commas"))
    for k, v in (c.extra_env or {}).items():
        if not isinstance(k, str) or not k.isidentifier() or not k.isascii():
            out.append(
                ConfigError(
                    "extra_env",
                    f"{k!r} is not a variable name: use letters, digits and '_' (not starting "
                    "with a digit)",
                )
            )
        elif k in _RESERVED_ENV:
            out.append(
                ConfigError(
                    "extra_env",
                    f"{k} is set by the launcher (GPUs by UUID): choose GPUs with gpus instead of "
                    "setting it",
                )
            )
        elif not isinstance(v, str) or "\0" in v:
            out.append(ConfigError("extra_env", f"the value of {k} must be text"))
    # the facts are this machine's, not a job's
    if machine is not None and not out and backends.of(c).runs_here:
        out += refusals(c, machine)
    return out


def validate(config: RunConfig, gpus: Gpus, machine: MachineFacts | None = None) -> None:
    """Raise the first ``ConfigError`` of ``problems``; return None when the config is fine."""
    found = problems(config, gpus, machine)
    if found:
        raise found[0]


def normalized(config: RunConfig) -> RunConfig:
    """The same config with an ``imagefolder:`` and a ``resume`` path made absolute (the run starts
    elsewhere)."""
    if config.resume.strip():
        config = dataclasses.replace(
            config, resume=str(Path(config.resume.strip()).expanduser().resolve())
        )
    if config.dataset.startswith(f"{trainer_options.IMAGEFOLDER}:"):
        p = Path(config.dataset.split(":", 1)[1]).expanduser().resolve()
        return dataclasses.replace(config, dataset=f"{trainer_options.IMAGEFOLDER}:{p}")
    return config
