"""Every run option, declared once: one ``FormField`` per ``RunConfig`` field.

A field holds its label, widget kind, options, step, help and session key (the Launch page draws
``FIELDS`` in ``LAYOUT``, a test checks it covers every field), its command-line flag and words
(``lab.cli.run_options`` builds ``launch``'s and ``sweep``'s parser from them), the trainer's flag
of a trainer option, passed always (``always_given``) or only when set (``trainer_flags``; both
used by ``lab.engine.launch.commands``) and its allowed range (``limit_problems``, one of
``lab.engine.launch.config``'s checks); the default is ``RunConfig``'s. A trainer option's field
(``knobs.trainer_field``) takes its trainer flag, kind, choices and range from the option's entry
in ``training.options``; the form's and ``lab launch``'s words stay the lab's own. The
performance knobs' fields are ``lab.engine.launch.knobs``'; the class is
``lab.engine.launch.field``'s. ``FOLDER`` is the form's PATH of ``imagefolder:PATH``. Values read
from the form become a ``RunConfig`` in ``lab.engine.launch.request``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from lab.engine.launch import knobs, models
from lab.engine.launch.field import FormField
from lab.engine.launch.trainer_options import DATASETS, IMAGEFOLDER
from lab.engine.spec.backends import BACKENDS, LOCAL, SLURM
from lab.engine.spec.modes import TORCHRUN
from lab.engine.spec.run import RunConfig

# the form's PATH of imagefolder:PATH (not a RunConfig field of its own)
FOLDER = "dataset_folder"


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
        cli_help="where to run: local (this machine) or slurm (a job on a Slurm cluster, with "
        "the options below)",
    ),
    FormField(
        "partition",
        "Partition (empty: the cluster's default)",
        "text",
        "launch_partition",
        only_if=("backend", SLURM),
        cli_help="slurm: the partition (default: the cluster's)",
    ),
    FormField(
        "gpus_per_node",
        "GPUs per node",
        "int",
        "launch_gpus_per_node",
        only_if=("backend", SLURM),
        help="DDP runs one process per GPU; 0: the nodes' CPUs with gloo.",
        cli_help="slurm: GPUs per node (ddp: one process each)",
    ),
    FormField(
        "cpus_per_task",
        "CPUs per node (0: Slurm's default)",
        "int",
        "launch_cpus_per_task",
        only_if=("backend", SLURM),
        cli_help="slurm: CPUs per node for the task (default: Slurm's)",
    ),
    FormField(
        "time",
        "Time limit (e.g. 30 or 2:00:00; empty: the partition's)",
        "text",
        "launch_time",
        only_if=("backend", SLURM),
        cli_help="slurm: the time limit, e.g. 30 or 2:00:00 (default: the partition's)",
    ),
    FormField(
        "account",
        "Account (optional)",
        "text",
        "launch_account",
        only_if=("backend", SLURM),
        cli_help="slurm: the account to charge",
    ),
    FormField(
        "sbatch_args",
        "More #SBATCH options (one per line, e.g. --qos=high)",
        "lines",
        "launch_sbatch_args",
        only_if=("backend", SLURM),
        cli_help="slurm: one more #SBATCH option, written --sbatch-arg=--qos=high (repeatable)",
        flag="sbatch_arg",
    ),
    knobs.trainer_field(
        "mode",
        "Mode",
        "launch_mode",
        kind="radio",
        cli_help="single: one device; dp: nn.DataParallel over the GPUs in one process; ddp: "
        "DistributedDataParallel under torchrun, a process per GPU (gloo on the CPU); fsdp: FSDP2 "
        "under torchrun, the model, gradients and optimizer state sharded over the ranks",
        option_labels=(
            "single — one device",
            "dp — nn.DataParallel, one process, batch split over GPUs",
            "ddp — DistributedDataParallel under torchrun, one process per GPU (or CPU process)",
            "fsdp — fully_shard under torchrun: less memory per GPU, more communication",
        ),
    ),
    FormField(
        "gpus",
        "GPUs",
        "gpus",
        "launch_gpu",
        only_if=("backend", LOCAL),
        cli_help="physical GPU numbers, e.g. 0,1; 'cpu' for none (default: all for dp/ddp, 0 for "
        "single)",
    ),
    FormField(
        "nproc",
        "Processes per node (ddp, fsdp)",
        "int",
        "launch_nproc",
        only_if=("mode", TORCHRUN),
        help="DDP and FSDP run one process per GPU; on the CPU each process is one gloo rank.",
        cli_help="ddp, fsdp: processes per node (default: one per GPU, 2 on the CPU)",
    ),
    knobs.trainer_field(
        "model",
        "Model",
        "launch_model",
        kind="select",
        options_of=models.names,
        help=f"tinycnn (a small CNN), or any torchvision classification model ({models.SOURCE}), "
        "built with weights=None: type to search. ViT and MaxViT take 224×224 images only.",
        cli_help="tinycnn, or any torchvision classification model: a name of "
        "torchvision.models.list_models(module=torchvision.models), e.g. resnet50, vit_b_16",
    ),
    knobs.trainer_field(
        "dataset",
        "Dataset",
        "launch_dataset_kind",
        kind="select",
        options=DATASETS + (IMAGEFOLDER,),
        help="digits: the 8×8 sample set shipped in sample_data/; synthetic: random tensors; "
        "imagefolder: PATH/train/<class>/*, PATH/val/<class>/* or PATH/<class>/*",
        cli_help="digits | synthetic | imagefolder:PATH",
    ),
    FormField(
        FOLDER, "Image folder path", "text", "launch_folder", only_if=("dataset", IMAGEFOLDER)
    ),
    knobs.trainer_field(
        "batch_size",
        "Global batch",
        "launch_batch",
        help="The same in every mode: DP splits it over GPUs, DDP runs batch / world size per "
        "rank.",
        cli_help="the global batch",
    ),
    knobs.trainer_field(
        "epochs",
        "Epochs",
        "launch_epochs",
        cli_help="passes over the training data (a run ends at --epochs or --max-steps, "
        "whichever comes first)",
    ),
    knobs.trainer_field(
        "max_steps",
        "Max steps (0 = no limit)",
        "launch_max_steps",
        step=10,
        cli_help="stop after this many optimizer steps (0: no limit, --epochs decides)",
    ),
    knobs.trainer_field(
        "lr",
        "Learning rate",
        "launch_lr",
        step=0.01,
        fmt="%.4f",
        cli_help="the SGD learning rate (the same in every mode: the global batch is the same)",
    ),
    knobs.trainer_field(
        "seed",
        "Seed",
        "launch_seed",
        cli_help="seeds the model's initial weights and the data order: the same seed in two "
        "modes gives comparable loss curves",
    ),
    knobs.trainer_field(
        "amp",
        "Mixed precision (AMP)",
        "launch_amp",
        help="CUDA: fp16 autocast + GradScaler; CPU: bf16 autocast",
    ),
    FormField(
        "name",
        "Name (optional)",
        "text",
        "launch_name",
        cli_help="a name for the run, part of its id; commands take it instead of the id where "
        "it is unique",
    ),
    FormField(
        "tags",
        "Tags (comma separated)",
        "text",
        "launch_tags",
        cli_help="a tag (repeatable)",
        flag="tag",
    ),
    knobs.trainer_field(
        "workers",
        "DataLoader workers",
        "launch_workers",
        cli_help="DataLoader worker processes per training process (0: load in the training "
        "process)",
    ),
    knobs.trainer_field(
        "log_every",
        "Log every (steps)",
        "launch_log_every",
        cli_help="write loss, throughput and memory every N optimizer steps (one logging "
        "window; Compare's intervals count windows)",
    ),
    knobs.trainer_field(
        "val_every",
        "Validate every (steps, 0 = each epoch)",
        "launch_val_every",
        step=10,
        cli_help="validate every N optimizer steps (0: at the end of each epoch)",
    ),
    knobs.trainer_field(
        "image_size",
        "Image size",
        "launch_image_size",
        step=8,
        cli_help="the side of the square images the model gets (digits are upscaled to it)",
    ),
    knobs.trainer_field(
        "checkpoint",
        "Checkpoint",
        "launch_checkpoint",
        cli_help="last: keep the last epoch's checkpoint (what `lab resume` continues from); "
        "none: write none",
    ),
    knobs.trainer_field(
        "grad_norm_warn",
        "Warn above grad norm (0 = off)",
        "launch_grad_warn",
        step=1.0,
        cli_help="log a warning (and the grad_spike finding) when the gradient norm exceeds "
        "this (0: off)",
    ),
    knobs.trainer_field(
        "profile_steps",
        "Profile steps (A:B, empty = off)",
        "launch_profile",
        help="torch.profiler over optimizer steps A to B-1 on every rank, e.g. 20:25 (steps "
        "20-24): the "
        "Compare page then shows where each step's time goes, and each rank's trace opens in "
        "Perfetto. "
        "Keep it short and after the first steps: profiled steps are slower and count in "
        "throughput.",
        cli_help="A:B: torch.profiler over optimizer steps A to B-1 on every rank (e.g. "
        "20:25); off by default",
    ),
    knobs.trainer_field(
        "stop_on_nan",
        "Stop on a NaN loss",
        "launch_stop_nan",
        help="End the run (failed, diagnosed nan_loss) as soon as train/loss is NaN or infinite.",
        cli_help="end the run (failed, nan_loss) as soon as train/loss is NaN or infinite",
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
        cli_help="seconds without a new step before the run is flagged stalled and its "
        "stacks saved (0: the larger of 60 s and 20 median steps)",
    ),
    FormField(
        "max_restarts",
        "Restarts (torchrun --max-restarts)",
        "int",
        "launch_restarts",
        only_if=("mode", TORCHRUN),
        help="A failed rank restarts all workers up to this many times; the trainer resumes from "
        "its last "
        "checkpoint (--resume auto).",
        cli_help="ddp, fsdp: torchrun restarts the workers up to N times; the trainer resumes "
        "from its last checkpoint",
    ),
    knobs.trainer_field(
        "data_delay_ms",
        "Data delay per batch (ms)",
        "launch_data_delay",
        step=5.0,
        fmt="%.0f",
        help="Simulate a slow input pipeline: each training batch waits this long (DataLoader "
        "workers "
        "overlap it). 0 = off.",
    ),
    knobs.trainer_field(
        "resume",
        "Resume from checkpoint (path, empty = fresh)",
        "launch_resume",
        help="A checkpoints/last.pt of an earlier run; the Live page's Resume button fills this "
        "in for you.",
        cli_help="a checkpoint file to start from (a run's checkpoints/last.pt); `python -m "
        "lab resume RUN` fills it in",
    ),
    FormField(
        "extra_env",
        "Extra environment (KEY=VALUE per line)",
        "lines",
        "launch_env",
        cli_help="extra environment, KEY=VALUE (repeatable)",
        flag="env",
    ),
    *knobs.FIELDS,  # precision, accumulation, memory format, DDP's options, NCCL preset
    FormField(
        "nnodes",
        "Nodes",
        "int",
        "launch_nnodes",
        cli_help="machines a ddp run spans (more than 1: run the printed command on each other "
        "node, or use --backend slurm)",
    ),
    FormField(
        "node_rank",
        "This node's rank",
        "int",
        "launch_node_rank",
        only_if=("backend", LOCAL),
        cli_help="this machine's rank among --nnodes (0: the one that hosts the rendezvous)",
    ),
    FormField(
        "rdzv_endpoint",
        "Rendezvous host:port (node 0)",
        "text",
        "launch_endpoint",
        only_if=("backend", LOCAL),
        cli_help="host:port of node 0 when --nnodes > 1",
    ),
)
BY_NAME = {f.name: f for f in FIELDS}
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunConfig)}
# the trainer's options every trainer run's command carries, in its order; the run folder and the
# device are the lab's to say (``lab.engine.launch.commands.trainer_args``), and ``resume`` is
# given there too, where a restarted attempt needs it
ALWAYS_GIVEN = (
    "mode", "model", "dataset", "epochs", "max_steps", "batch_size", "lr", "workers", "seed",
    "log_dir", "log_every", "val_every", "image_size", "checkpoint", "grad_norm_warn", "device",
)  # fmt: skip
_NOT_WHEN_SET = set(ALWAYS_GIVEN) | {"resume"}


def _text(f: FormField, value: Any) -> str:
    return str(float(value)) if f.kind == "float" else str(value)


def always_given(c: Any, lab_own: dict[str, str]) -> list[str]:
    """The flags and values of ``ALWAYS_GIVEN``: each field's value in ``c`` (a float field's as a
    float), or the lab's own ``lab_own[name]`` for the run folder and the device."""
    out: list[str] = []
    for name in ALWAYS_GIVEN:
        f = BY_NAME.get(name)
        if f is None:
            out += ["--" + name.replace("_", "-"), lab_own[name]]
        else:
            out += [f.trainer_flag, _text(f, getattr(c, name))]
    return out


def trainer_flags(c: Any) -> list[str]:
    """The trainer's flags of the options it is given only when set (not empty, not RunConfig's
    default), in the form's order: a flag alone for a switch, else the flag and the value (a float
    field's as a float)."""
    out: list[str] = []
    for f in FIELDS:
        given = f.trainer_flag and f.name not in _NOT_WHEN_SET
        value = getattr(c, f.name, None) if given else None
        if not value or value == _DEFAULTS.get(f.name):  # not set: the trainer's default
            continue
        out += [f.trainer_flag] if value is True else [f.trainer_flag, _text(f, value)]
    return out


def limit_problems(c: Any) -> list[tuple[str, str]]:
    """(field, message) for each field with ``limits`` whose value is not a number within them."""
    out = []
    for f in FIELDS:
        if f.limits is None:
            continue
        value, (lo, hi) = getattr(c, f.name), f.limits
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and lo <= value <= hi
        if not ok:
            off = " (off)" if lo == 0 else ""
            out.append((f.name, f"{f.name} {value} must be {lo:g}{off} to {hi:g} {f.unit}".strip()))
    return out


# Where each field sits: sections (an expander title, or None), rows of
# columns, a column one field or several stacked.
LAYOUT: list[tuple[str | None, list[list[str | tuple[str, ...]]]]] = [
    (None, [["backend"]]),
    (
        "Slurm job (where to run: slurm)",
        [["partition", "gpus_per_node", "cpus_per_task"], ["time", "account"], ["sbatch_args"]],
    ),
    (
        None,
        [
            ["mode"],
            ["gpus"],
            ["nproc"],
            ["model", ("dataset", FOLDER)],
            ["batch_size", "epochs", "max_steps"],
            ["lr", "seed", "amp"],
            ["name", "tags", "profile_steps"],
        ],
    ),
    (
        "More options",
        [
            ["workers", "log_every", "val_every"],
            ["image_size", "checkpoint", "grad_norm_warn"],
            ["extra_env"],
        ],
    ),
    ("Performance knobs", knobs.ROWS),
    (
        "When it goes wrong",
        [["stop_on_nan", "stall_after", "max_restarts"], ["data_delay_ms", "resume"]],
    ),
    ("Several machines (DDP or FSDP over nodes)", [["nnodes", "node_rank", "rdzv_endpoint"]]),
]
