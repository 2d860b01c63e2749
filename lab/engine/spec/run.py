"""What a run is asked to do: the ``RunConfig`` value, its modes and backends, ``ConfigError``.

The value only: how many processes, how many ways the batch splits and how many threads each
process gets follow from it here; every check on it is in ``lab.engine.launch.config``, which
builds on the Slurm job's options (``lab.engine.slurm.options``) and the pre-flight's checks, all
of which import this one and none of which it imports.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Union

SINGLE, DP, DDP = "single", "dp", "ddp"
MODES = (SINGLE, DP, DDP)
CPU_DDP_PROCESSES = 2  # DDP on a machine without GPUs: two gloo processes
LOCAL, SLURM = "local", "slurm"
BACKENDS = (LOCAL, SLURM)  # where a run goes: this machine, or a job on a Slurm cluster
# a Slurm job's
JOB_FIELDS = ("partition", "gpus_per_node", "cpus_per_task", "time", "account", "sbatch_args")
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


def omp_threads(config: RunConfig, cores: int | None = None) -> int:
    """OMP_NUM_THREADS for each process: the cores shared out (a Slurm job's CPUs per task), never
    0."""
    cores = (config.cpus_per_task or config.processes) if config.backend == SLURM else cores
    return max(1, (cores or os.cpu_count() or 1) // config.processes)


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
    nccl_preset: str = ""  # a name of lab.engine.spec.nccl.PRESETS: its variables in the env
    memory_snapshot: int = 0  # the trainer's --memory-snapshot N (CUDA only); 0 = off

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
    def sweep_stem(self) -> str:
        """The stem of a sweep's run names when the run has no name of its own."""
        return f"cmp-{self.model}"

    @property
    def processes(self) -> int:
        """Processes this node starts (ddp: nproc; otherwise one)."""
        return processes(self)

    @property
    def world_size(self) -> int:
        """How many ways the global batch is split."""
        return world_size(self)
