"""The launch form as a table: one ``FormField`` per ``RunConfig`` field.

Each field has its label, widget kind, options, step, help and session key; the Launch page
draws ``FIELDS`` in a loop (``BY_NAME`` by field name), and a test checks it covers every field.
``FOLDER`` is the form's PATH of ``imagefolder:PATH``. Values read from it become a
``RunConfig`` in ``lab.engine.launch.request``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from lab.engine.launch import models
from lab.engine.launch.runconfig import BACKENDS, LOCAL, MODES, SLURM
from lab.engine.launch.trainer_options import CHECKPOINTS, DATASETS, IMAGEFOLDER

# the form's PATH of imagefolder:PATH (not a RunConfig field of its own)
FOLDER = "dataset_folder"


@dataclass(frozen=True)
class FormField:
    """One widget of the launch form. ``only_if=(field, value)``: enabled only while that field has
    that value."""

    name: str
    label: str
    kind: str  # radio | select | int | float | check | text | lines | gpus
    key: str
    help: str = ""
    options: tuple[str, ...] = ()
    option_labels: tuple[str, ...] = ()
    step: float = 1
    fmt: str | None = None
    only_if: tuple[str, str] | None = None
    # options asked for when drawn (costly to list)
    options_of: Callable[[], tuple[str, ...]] | None = None

    def choices(self) -> tuple[str, ...]:
        """The options of a select or radio: ``options``, or what ``options_of`` lists now."""
        return self.options or (self.options_of() if self.options_of else ())

    def shown(self, option: str) -> str:
        """The text shown for one of the options."""
        return dict(zip(self.options, self.option_labels)).get(option, option)

    def enabled(self, values: Mapping[str, Any]) -> bool:
        """Whether the widget takes input, given the values above it (a disabled one gives None)."""
        return self.only_if is None or values.get(self.only_if[0]) == self.only_if[1]


# in the order a page reads them: a field's only_if names one above it
FIELDS: tuple[FormField, ...] = (
    FormField(
        "backend",
        "Where to run",
        "radio",
        "launch_backend",
        options=BACKENDS,
        option_labels=(
            "local — this machine",
            "slurm — a job on a Slurm cluster (nodes under 'Several machines')",
        ),
    ),
    FormField(
        "partition",
        "Partition (empty: the cluster's default)",
        "text",
        "launch_partition",
        only_if=("backend", SLURM),
    ),
    FormField(
        "gpus_per_node",
        "GPUs per node",
        "int",
        "launch_gpus_per_node",
        only_if=("backend", SLURM),
        help="DDP runs one process per GPU; 0: the nodes' CPUs with gloo.",
    ),
    FormField(
        "cpus_per_task",
        "CPUs per node (0: Slurm's default)",
        "int",
        "launch_cpus_per_task",
        only_if=("backend", SLURM),
    ),
    FormField(
        "time",
        "Time limit (e.g. 30 or 2:00:00; empty: the partition's)",
        "text",
        "launch_time",
        only_if=("backend", SLURM),
    ),
    FormField(
        "account", "Account (optional)", "text", "launch_account", only_if=("backend", SLURM)
    ),
    FormField(
        "sbatch_args",
        "More #SBATCH options (one per line, e.g. --qos=high)",
        "lines",
        "launch_sbatch_args",
        only_if=("backend", SLURM),
    ),
    FormField(
        "mode",
        "Mode",
        "radio",
        "launch_mode",
        options=MODES,
        option_labels=(
            "single — one device",
            "dp — nn.DataParallel, one process, batch split over GPUs",
            "ddp — DistributedDataParallel under torchrun, one process per GPU (or CPU process)",
        ),
    ),
    FormField("gpus", "GPUs", "gpus", "launch_gpu", only_if=("backend", LOCAL)),
    FormField(
        "nproc",
        "Processes per node (ddp)",
        "int",
        "launch_nproc",
        only_if=("mode", "ddp"),
        help="DDP runs one process per GPU; on the CPU each process is one gloo rank.",
    ),
    FormField(
        "model",
        "Model",
        "select",
        "launch_model",
        options_of=models.names,
        help=f"tinycnn (a small CNN), or any torchvision classification model ({models.SOURCE}), "
        "built with weights=None: type to search. ViT and MaxViT take 224×224 images only.",
    ),
    FormField(
        "dataset",
        "Dataset",
        "select",
        "launch_dataset_kind",
        options=DATASETS + (IMAGEFOLDER,),
        help="digits: the 8×8 sample set shipped in sample_data/; synthetic: random tensors; "
        "imagefolder: PATH/train/<class>/*, PATH/val/<class>/* or PATH/<class>/*",
    ),
    FormField(
        FOLDER, "Image folder path", "text", "launch_folder", only_if=("dataset", IMAGEFOLDER)
    ),
    FormField(
        "batch_size",
        "Global batch",
        "int",
        "launch_batch",
        help="The same in every mode: DP splits it over GPUs, DDP runs batch / world size per "
        "rank.",
    ),
    FormField("epochs", "Epochs", "int", "launch_epochs"),
    FormField("max_steps", "Max steps (0 = no limit)", "int", "launch_max_steps", step=10),
    FormField("lr", "Learning rate", "float", "launch_lr", step=0.01, fmt="%.4f"),
    FormField("seed", "Seed", "int", "launch_seed"),
    FormField(
        "amp",
        "Mixed precision (AMP)",
        "check",
        "launch_amp",
        help="CUDA: fp16 autocast + GradScaler; CPU: bf16 autocast",
    ),
    FormField("name", "Name (optional)", "text", "launch_name"),
    FormField("tags", "Tags (comma separated)", "text", "launch_tags"),
    FormField("workers", "DataLoader workers", "int", "launch_workers"),
    FormField("log_every", "Log every (steps)", "int", "launch_log_every"),
    FormField(
        "val_every", "Validate every (steps, 0 = each epoch)", "int", "launch_val_every", step=10
    ),
    FormField("image_size", "Image size", "int", "launch_image_size", step=8),
    FormField("checkpoint", "Checkpoint", "select", "launch_checkpoint", options=CHECKPOINTS),
    FormField(
        "grad_norm_warn", "Warn above grad norm (0 = off)", "float", "launch_grad_warn", step=1.0
    ),
    FormField(
        "profile_steps",
        "Profile steps (A:B, empty = off)",
        "text",
        "launch_profile",
        help="torch.profiler over optimizer steps A to B-1 on every rank, e.g. 20:25 (steps "
        "20-24): the "
        "Compare page then shows where each step's time goes, and each rank's trace opens in "
        "Perfetto. "
        "Keep it short and after the first steps: profiled steps are slower and count in "
        "throughput.",
    ),
    FormField(
        "stop_on_nan",
        "Stop on a NaN loss",
        "check",
        "launch_stop_nan",
        help="End the run (failed, diagnosed nan_loss) as soon as train/loss is NaN or infinite.",
    ),
    FormField(
        "stall_after",
        "Stalled after (s, 0 = auto)",
        "float",
        "launch_stall",
        step=30.0,
        fmt="%.0f",
        help="Flag the run stalled (and save every rank's stack) when its processes live but no "
        "new step "
        "comes for this long; auto: the larger of 60 s and 20 median steps. Start-up counts.",
    ),
    FormField(
        "max_restarts",
        "Restarts (torchrun --max-restarts)",
        "int",
        "launch_restarts",
        only_if=("mode", "ddp"),
        help="A failed rank restarts all workers up to this many times; the trainer resumes from "
        "its last "
        "checkpoint (--resume auto).",
    ),
    FormField(
        "data_delay_ms",
        "Data delay per batch (ms)",
        "float",
        "launch_data_delay",
        step=5.0,
        fmt="%.0f",
        help="Simulate a slow input pipeline: each training batch waits this long (DataLoader "
        "workers "
        "overlap it). 0 = off.",
    ),
    FormField(
        "resume",
        "Resume from checkpoint (path, empty = fresh)",
        "text",
        "launch_resume",
        help="A checkpoints/last.pt of an earlier run; the Live page's Resume button fills this "
        "in for you.",
    ),
    FormField("extra_env", "Extra environment (KEY=VALUE per line)", "lines", "launch_env"),
    FormField("nnodes", "Nodes", "int", "launch_nnodes"),
    FormField(
        "node_rank", "This node's rank", "int", "launch_node_rank", only_if=("backend", LOCAL)
    ),
    FormField(
        "rdzv_endpoint",
        "Rendezvous host:port (node 0)",
        "text",
        "launch_endpoint",
        only_if=("backend", LOCAL),
    ),
)
BY_NAME = {f.name: f for f in FIELDS}
