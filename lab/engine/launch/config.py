"""What a run is asked to do: ``RunConfig`` and its validation.

This module owns the launch configuration (mode, devices, processes, nodes,
model, data and the trainer's options) and every check made before anything
starts (the model's name and image size through ``lab.engine.launch.models``).
``problems`` returns all ``ConfigError(field, message)`` at once, each
message naming the fix; ``validate`` raises the first. The trainer's own
options (numbers, data set, profile window) are checked in
``lab.engine.launch.trainer_options``; the configs of a "Compare modes" sweep are
made in ``lab.engine.sweep.plan``. Where a run goes (``backend``: this machine,
or a Slurm cluster with the options of ``lab.engine.slurm.job``, which checks
them) is part of the config. Nothing here starts a process or touches NVML:
the GPUs are an argument, either a count or the physical indices NVML could
read (``devices.usable_indices``), which need not be contiguous where a GPU
refuses to be opened. Given the machine's facts
(``lab.engine.preflight.checks.machine_facts``) ``problems`` and ``validate`` also
hold the pre-flight's refusals (``lab.engine.preflight.checks.refusals``), so a
refused run starts nothing; the machine facts are an argument too.
Tested by tests/test_engine_config.py and tests/test_preflight_seeds.py (refusals).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Union

from lab.engine.launch import models, trainer_options

if TYPE_CHECKING:
    from lab.engine.preflight.checks import MachineFacts

SINGLE, DP, DDP = "single", "dp", "ddp"
MODES = (SINGLE, DP, DDP)
CPU_DDP_PROCESSES = 2  # DDP on a machine without GPUs: two gloo processes
LOCAL, SLURM = "local", "slurm"
BACKENDS = (LOCAL, SLURM)  # where a run goes: this machine, or a job on a Slurm cluster
# a Slurm job's
JOB_FIELDS = ("partition", "gpus_per_node", "cpus_per_task", "time", "account", "sbatch_args")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")
_ENDPOINT = re.compile(r"^([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\]):(\d{1,5})$")
# Chosen by the launcher from the config; a user value would silently undo it.
_RESERVED_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TORCHELASTIC_ERROR_FILE")
# a GPU count (indices 0..n-1), or the physical indices that can be used
Gpus = Union[int, Iterable[int]]


def usable(gpus: Gpus) -> tuple[int, ...]:
    """The usable physical GPU indices, sorted, from a count or from the indices themselves."""
    return tuple(range(gpus)) if isinstance(gpus, int) else tuple(sorted(set(gpus)))


class ConfigError(ValueError):
    """One problem with a config: the field it concerns and a message naming the fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def processes(c: Any) -> int:
    """Processes one node starts for a run (a RunConfig or a user's ScriptConfig): ddp nproc,
    otherwise one."""
    return c.nproc if c.mode == "ddp" else 1


def world_size(c: Any) -> int:
    """How many ways a run's global batch is split (a RunConfig or a ScriptConfig): DP only over 2+
    GPUs."""
    if c.mode == "ddp":
        return c.nproc * c.nnodes
    node_gpus = c.gpus_per_node if c.backend == SLURM else len(c.gpus)
    return node_gpus if c.mode == "dp" and node_gpus >= 2 else 1


@dataclass(frozen=True)
class RunConfig:
    """A run as the user asked for it. ``gpus`` are physical indices; empty = CPU.

    ``batch_size`` is the global batch in every mode. ``nproc`` is the number of
    processes per node and only means something for ``ddp``.
    """

    mode: str = "single"
    gpus: tuple[int, ...] = ()
    nproc: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str = ""
    model: str = "tinycnn"
    dataset: str = "digits"
    batch_size: int = 64
    epochs: int = 1
    max_steps: int = 0
    lr: float = 0.05
    amp: bool = False
    workers: int = 0
    seed: int = 0
    name: str = ""
    tags: tuple[str, ...] = ()
    extra_env: dict[str, str] = field(default_factory=dict)
    log_every: int = 10
    val_every: int = 0
    image_size: int = 32
    checkpoint: str = "last"
    grad_norm_warn: float = 0.0
    profile_steps: str = ""  # "A:B": the trainer's --profile-steps (steps A..B-1); empty = off
    # slurm: the fields below are the job's (lab.engine.slurm.job), nnodes its node count
    backend: str = LOCAL
    partition: str = ""
    gpus_per_node: int = 0
    cpus_per_task: int = 0  # 0: Slurm's default
    # the job's time limit as sbatch reads it (e.g. 30, 2:00:00); empty: the partition's
    time: str = ""
    account: str = ""
    sbatch_args: tuple[str, ...] = ()
    # seconds without a new step before "stalled"; 0 = max(60 s, 20 median steps)
    stall_after: float = 0.0
    stop_on_nan: bool = False  # the trainer's --stop-on-nan
    data_delay_ms: float = 0.0  # the trainer's --data-delay-ms: a slow input pipeline, simulated
    # torchrun's --max-restarts (ddp); the trainer then resumes from its last checkpoint
    max_restarts: int = 0
    resume: str = ""  # a checkpoint file to start from (the trainer's --resume); empty = fresh

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["gpus"] = list(self.gpus)
        d["tags"] = list(self.tags)
        d["sbatch_args"] = list(self.sbatch_args)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        """The inverse of ``to_dict``; unknown keys are ignored (older/newer run.json)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        for name in ("gpus", "tags", "sbatch_args"):
            if name in kw:
                kw[name] = tuple(kw[name])
        if "extra_env" in kw:
            kw["extra_env"] = dict(kw["extra_env"] or {})
        return cls(**kw)

    @property
    def processes(self) -> int:
        """Processes this node starts (ddp: nproc; otherwise one)."""
        return processes(self)

    @property
    def world_size(self) -> int:
        """How many ways the global batch is split."""
        return world_size(self)


def _split_unit(config: RunConfig) -> str:
    if config.mode == "ddp":
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
    for g in c.gpus if c.backend != SLURM else ():
        if not isinstance(g, int) or isinstance(g, bool) or g < 0:
            out.append(
                ConfigError("gpus", f"{g!r} is not a GPU index: use whole numbers such as 0,1")
            )
        elif g not in have:
            out.append(_no_such_gpu(g, have))
    # a seed's trap: DP quietly runs on the GPUs it sees
    if c.backend != SLURM and c.mode == "dp" and len(set(c.gpus)) > len(have):
        fix = f"pick at most {len(have)}" if have else "leave gpus empty to run on the CPU"
        out.append(
            ConfigError(
                "gpus",
                f"dp asks for {len(set(c.gpus))} GPUs but {len(have)} are visible: "
                f"DataParallel would quietly use fewer; {fix}",
            )
        )
    if c.mode == "single" and len(c.gpus) > 1:
        out.append(
            ConfigError(
                "gpus",
                f"single mode uses one device, {len(c.gpus)} GPUs given: pick one GPU or use "
                "dp/ddp",
            )
        )
    if c.mode == "ddp":
        if not isinstance(c.nproc, int) or c.nproc < 1:
            out.append(
                ConfigError(
                    "nproc",
                    f"ddp needs at least one process per node, got {c.nproc}: use nproc 1 or more",
                )
            )
        elif c.gpus and c.nproc != len(c.gpus):
            out.append(
                ConfigError(
                    "nproc",
                    f"ddp runs one process per GPU: {len(c.gpus)} GPUs given, so use nproc "
                    f"{len(c.gpus)}",
                )
            )
    elif c.nproc != 1:
        where = "on the CPU " if c.mode == "dp" and not c.gpus else ""
        out.append(
            ConfigError(
                "nproc",
                f"{c.mode} {where}runs in one process, nproc {c.nproc} given: use nproc 1, or "
                "mode ddp for several processes",
            )
        )
    return out


def _node_problems(c: RunConfig) -> list[ConfigError]:
    out: list[ConfigError] = []
    if not isinstance(c.nnodes, int) or c.nnodes < 1:
        return [ConfigError("nnodes", f"nnodes must be 1 or more, got {c.nnodes}")]
    if c.nnodes > 1:
        if c.mode != "ddp":
            out.append(
                ConfigError(
                    "mode", f"several nodes need mode ddp, not {c.mode}: use ddp or nnodes 1"
                )
            )
        m = _ENDPOINT.match(c.rdzv_endpoint or "")
        if c.backend == SLURM:
            # the job finds its first node itself (lab.engine.slurm.job checks the endpoint is left
            # empty)
            pass
        elif not c.rdzv_endpoint:
            out.append(
                ConfigError(
                    "rdzv_endpoint",
                    f"nnodes {c.nnodes} needs a rendezvous endpoint: give host:port of node 0, "
                    "e.g. 10.0.0.1:29400",
                )
            )
        elif not m or not 0 < int(m.group(2)) < 65536:
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
        return [ConfigError("mode", f"unknown mode {c.mode!r}: use single, dp or ddp")]
    out += _device_problems(c, gpus)
    out += _node_problems(c)
    out += [ConfigError(f, msg) for f, msg in trainer_options.number_problems(c)]
    # it imports this module: the backend and the Slurm job's options
    from lab.engine.slurm import job as slurm

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
    if machine is not None and not out and c.backend != SLURM:
        from lab.engine.preflight.checks import refusals  # here: preflight builds on this module

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
