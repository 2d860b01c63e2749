"""What a run is asked to do: the ``RunConfig`` value, its modes, ``ConfigError``.

One value for both kinds of run: ``kind`` "trainer" (the lab's trainer, its options the fields
after ``seed``) or "script" (a user's own script: ``script``, ``args``, ``cwd``, ``events_dir``,
``total_steps``). ``PLACEMENT`` is what both share: where and how the run is placed (mode,
devices, processes, nodes, the backend and its Slurm job), its name, tags and environment.
run.json's ``config`` keeps the keys each kind has always had (``to_dict``).

The value only: how many processes, how many ways the batch splits and how many threads each
process gets follow from it here; every check on it is in ``lab.engine.launch.config``, which
builds on the Slurm job's options (``lab.engine.slurm.options``) and the pre-flight's checks, all
of which import this one and none of which it imports. Where it goes (this machine or a Slurm
job) is its backend's to say: ``lab.engine.spec.backends``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Union

from lab.engine.spec import backends, modes
from lab.engine.spec.backends import LOCAL
from lab.engine.spec.modes import DP
from lab.runfolder import SCRIPT, TRAINER

CPU_DDP_PROCESSES = 2  # DDP on a machine without GPUs: two gloo processes
# a Slurm job's
JOB_FIELDS = ("partition", "gpus_per_node", "cpus_per_task", "time", "account", "sbatch_args")
# what a trainer run and a script run share: where and how the run is placed, its name and env
PLACEMENT = (
    "mode", "gpus", "nproc", "nnodes", "node_rank", "rdzv_endpoint", "name", "tags", "extra_env",
    "backend", *JOB_FIELDS, "stall_after", "nccl_preset",
)  # fmt: skip
# a script run's own fields, and its run.json config's keys in the order they have always had
SCRIPT_ONLY = ("script", "args", "cwd", "events_dir", "total_steps")
SCRIPT_KEYS = (
    "script", "args", "cwd", "mode", "gpus", "nproc", "nnodes", "node_rank", "rdzv_endpoint",
    "events_dir", "total_steps", "name", "tags", "extra_env", "backend", *JOB_FIELDS,
    "stall_after", "nccl_preset", "kind",
)  # fmt: skip
MODULE_PREFIX = "-m "  # a script given as "-m package.module": run a module, as python -m does
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
    """Processes one node starts for a run: nproc under torchrun (ddp, fsdp), otherwise one."""
    return c.nproc if modes.torchrun(c.mode) else 1


def world_size(c: Any) -> int:
    """How many ways a run's global batch is split: DP only over 2+ GPUs."""
    if modes.torchrun(c.mode):
        return c.nproc * c.nnodes
    node_gpus = backends.of(c).node_gpus(c)
    return node_gpus if c.mode == DP and node_gpus >= 2 else 1


def omp_threads(config: RunConfig, cores: int | None = None) -> int:
    """OMP_NUM_THREADS for each process: the cores shared out (a Slurm job's CPUs per task), never
    0."""
    cores = backends.of(config).cores(config, cores)
    return max(1, (cores or os.cpu_count() or 1) // config.processes)


@dataclass(frozen=True)
class RunConfig:
    """A run as the user asked for it. ``gpus`` are physical indices; empty = CPU.

    ``batch_size`` is the global batch in every mode. ``nproc`` is the number of processes per
    node and only means something under torchrun (``ddp``, ``fsdp``). A script run (``kind``
    "script") has ``script`` (a path or ``-m package.module``), ``args``, ``cwd`` (empty: the
    script's folder), ``events_dir`` and ``total_steps`` (0: unknown; it only feeds the ETA);
    the trainer's options keep their defaults there and mean nothing.
    """

    kind: str = TRAINER
    mode: str = "single"
    gpus: tuple[int, ...] = ()
    nproc: int = 1  # processes per node under torchrun (ddp, fsdp)
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str = ""
    model: str = "tinycnn"
    dataset: str = "digits"
    batch_size: int = 64
    # 3 epochs of digits (66 steps, 6 logging windows of 10): 5 steady windows, the fewest whose
    # order-statistics interval of the median covers 90% (1 - 2/2**5 = 94%); 1 epoch gave 2 (50%)
    epochs: int = 3
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
    # slurm: the fields below are the job's (lab.engine.launch.slurm_job), nnodes its node count
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
    # the performance knobs (lab.engine.launch.knobs): the trainer's flags of the same names
    precision: str = "fp32"  # fp32 | fp16 (CUDA) | bf16; amp is fp16 on CUDA, bf16 on the CPU
    accum_steps: int = 1  # micro-batches per optimizer step; the global batch stays the step's
    channels_last: bool = False
    bucket_cap_mb: float = 0.0  # ddp; 0 = DDP's default (25)
    grad_as_bucket_view: bool = False  # ddp
    static_graph: bool = False  # ddp
    find_unused_parameters: bool = False  # ddp
    sync_bn: bool = False  # ddp, GPUs: nn.SyncBatchNorm.convert_sync_batchnorm before the wrap
    reshard_after_forward: str = "on"  # fsdp: on = ZeRO-3, off = ZeRO-2-like
    fsdp_cpu_offload: bool = False  # fsdp, GPUs: the shards and the optimizer step on the CPU
    compile: str = "off"  # torch.compile, every mode: on | off
    nccl_preset: str = ""  # a name of lab.engine.spec.nccl.PRESETS: its variables in the env
    memory_snapshot: int = 0  # the trainer's --memory-snapshot N (CUDA only); 0 = off
    # a script run's own (kind "script")
    script: str = ""
    args: tuple[str, ...] = ()
    cwd: str = ""
    events_dir: str = ""
    total_steps: int = 0

    def to_dict(self) -> dict[str, Any]:
        """run.json's ``config``: a trainer run's fields, or a script run's keys (``SCRIPT_KEYS``),
        as each kind has always had them."""
        d = dataclasses.asdict(self)
        for name in ("gpus", "tags", "sbatch_args", "args"):
            d[name] = list(d[name])
        if self.kind == SCRIPT:
            return {k: d[k] for k in SCRIPT_KEYS}
        return {k: v for k, v in d.items() if k not in SCRIPT_ONLY and k != "kind"}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        """The inverse of ``to_dict``; unknown keys are ignored (older/newer run.json)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        for name in ("gpus", "tags", "sbatch_args", "args"):
            if name in kw:
                kw[name] = tuple(kw[name])
        if "extra_env" in kw:
            kw["extra_env"] = dict(kw["extra_env"] or {})
        return cls(**kw)

    @property
    def sweep_stem(self) -> str:
        """The stem of a sweep's run names when the run has no name of its own."""
        return f"cmp-{self.model}" if self.kind == TRAINER else f"cmp-{script_stem(self)}"

    @property
    def module(self) -> str | None:
        """A script run's module name of ``-m package.module``, else None."""
        if self.script.startswith(MODULE_PREFIX):
            return self.script[len(MODULE_PREFIX) :].strip()
        return None

    def work_dir(self) -> Path:
        """Where a script runs: ``cwd``, else the script's folder (a module: the current
        folder)."""
        if self.cwd.strip():
            return Path(self.cwd.strip()).expanduser()
        if self.module is not None:
            return Path.cwd()
        return Path(self.script.strip()).expanduser().parent

    @property
    def processes(self) -> int:
        """Processes this node starts (ddp: nproc; otherwise one)."""
        return processes(self)

    @property
    def world_size(self) -> int:
        """How many ways the global batch is split."""
        return world_size(self)

    @property
    def micro_batches(self) -> int:
        """Forwards per optimizer step: the accumulation steps asked for, 1 when none or when the
        value is not a whole number above 1 (the checks refuse it, not this)."""
        n = self.accum_steps
        return n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1


def script_stem(c: RunConfig) -> str:
    """A script run name's stem: its name, else its file's or module's."""
    raw = c.name or (c.module.rpartition(".")[2] if c.module is not None else Path(c.script).stem)
    return re.sub(r"[^A-Za-z0-9._-]", "-", raw).strip(".-")[:40] or "script"


def script_run(script: str = "", **fields: Any) -> RunConfig:
    """A user's script as a run: ``RunConfig(kind="script", script=script, **fields)``."""
    return RunConfig(kind=SCRIPT, script=script, **fields)


def trainer_fields() -> tuple[dataclasses.Field, ...]:
    """``RunConfig``'s fields of a trainer run, what its form, flags and run.json have: all but
    ``kind`` and a script run's own (``SCRIPT_ONLY``)."""
    return tuple(
        f for f in dataclasses.fields(RunConfig) if f.name != "kind" and f.name not in SCRIPT_ONLY
    )
