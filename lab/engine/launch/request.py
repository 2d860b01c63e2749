"""What a person asks for (the Launch form, the command line) as a ``RunConfig``, and what is shown
before a launch.

``FIELDS`` is the launch form as a table: one ``FormField`` per ``RunConfig``
field (its label, widget kind, options, step, help and session key); the
Launch page draws it in a loop, and a test checks it covers every field.
``run_config(values, gpus)`` is the one translation of form or command
line values into a ``RunConfig``: GPUs as text or a list (default: what the
mode makes sense with, among the usable GPUs ``gpus``, a count or the
physical indices NVML could read), DDP's processes per node (default: one per GPU,
``CPU_DDP_PROCESSES`` on the CPU), the dataset kind and folder, tags and
``KEY=VALUE`` text; a value that cannot be read comes back as a
``ConfigError`` beside the config (the field left at its default), so a form
shows every problem at once. ``form_values`` is its inverse, the widgets'
starting values. ``preview`` is what is shown before a launch: the pre-flight
lines, the command with a placeholder for the port chosen at the start, the
environment it changes, and the other nodes' commands; for a Slurm run
(``backend`` slurm) the Slurm pre-flight lines, the job script and the
sbatch command instead. Tested by tests/test_engine_request.py.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from lab.engine.devices.nvml import DeviceSnapshot
from lab.engine.launch import models
from lab.engine.launch.commands import build_command, other_node_commands
from lab.engine.launch.config import (
    BACKENDS,
    CPU_DDP_PROCESSES,
    LOCAL,
    MODES,
    SLURM,
    ConfigError,
    Gpus,
    RunConfig,
    usable,
)
from lab.engine.launch.trainer_options import CHECKPOINTS, DATASETS, IMAGEFOLDER
from lab.engine.preflight.checks import preflight
from lab.runfolder import REPO_ROOT, root_or_default

# where a shown command has the port the supervisor picks free at the start
PORT_PLACEHOLDER = "<port>"
RUN_ID_PLACEHOLDER = "<run-id>"  # the run folder's name is drawn at the launch
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


def default_gpus(mode: str, gpus: Gpus) -> tuple[int, ...]:
    """What a mode makes sense with here: none without GPUs, the first usable for single, all for
    dp/ddp."""
    have = usable(gpus)
    return have[:1] if mode == "single" else have


def default_nproc(mode: str, gpus: tuple[int, ...]) -> int:
    """Processes per node: ddp one per GPU (``CPU_DDP_PROCESSES`` on the CPU); the other modes
    one."""
    return (len(gpus) or CPU_DDP_PROCESSES) if mode == "ddp" else 1


def _gpus(value: str | Iterable[int] | None, mode: str, gpus: Gpus) -> tuple[int, ...]:
    if value is None:
        return default_gpus(mode, gpus)
    if not isinstance(value, str):
        return tuple(value)
    if value.strip().lower() in ("", "cpu", "none"):
        return ()
    try:
        return tuple(int(x) for x in value.split(",") if x.strip())
    except ValueError:
        raise ConfigError(
            "gpus", f"{value!r} is not a list of GPU numbers: use e.g. 0,1, or cpu for none"
        ) from None


def _lines(value: str | Iterable[str]) -> tuple[str, ...]:
    """Text (one item per line) or a list as a tuple; blank lines left out."""
    items = value.splitlines() if isinstance(value, str) else list(value)
    return tuple(
        s.strip() if isinstance(s, str) else s for s in items if not isinstance(s, str) or s.strip()
    )


def _tags(value: str | Iterable[str]) -> tuple[str, ...]:
    items = re.split(r"[,\s]+", value.strip()) if isinstance(value, str) else list(value)
    return tuple(dict.fromkeys(t for t in items if t))  # in order, each once


def _env(value: str | Iterable[str] | Mapping[str, str]) -> dict[str, str]:
    if isinstance(value, Mapping):
        return dict(value)
    out: dict[str, str] = {}
    for item in value.splitlines() if isinstance(value, str) else value:
        if not item.strip() or item.strip().startswith("#"):
            continue
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                "extra_env", f"{item.strip()!r} is not KEY=VALUE: use e.g. NCCL_DEBUG=INFO"
            )
        out[key.strip()] = val.strip()  # the key itself is checked by config.problems
    return out


def _dataset(kind: str, folder: str | None) -> str:
    return f"{IMAGEFOLDER}:{folder.strip()}" if kind == IMAGEFOLDER and folder is not None else kind


def run_config(values: Mapping[str, Any], gpus: Gpus) -> tuple[RunConfig, list[ConfigError]]:
    """A ``RunConfig`` from form or command-line values, and the values that could not be read.

    ``values`` maps RunConfig field names (and ``dataset_folder``) to what was
    given; a missing or None value takes its default. Nothing is validated
    beyond reading: ``config.problems`` does that.
    """
    given = {k: v for k, v in values.items() if v is not None}
    errors: list[ConfigError] = []
    kw = {f.name: given[f.name] for f in dataclasses.fields(RunConfig) if f.name in given}
    mode = kw.get("mode", RunConfig.mode)
    # a Slurm job's GPUs are its nodes'
    local_gpus = gpus if kw.get("backend", LOCAL) == LOCAL else 0
    try:
        kw["gpus"] = _gpus(given.get("gpus"), mode, local_gpus)
    except ConfigError as e:
        errors.append(e)
        kw["gpus"] = default_gpus(mode, local_gpus)
    g = kw.get("gpus_per_node", 0)
    # ddp: one process each
    node_gpus = kw["gpus"] or (tuple(range(g)) if isinstance(g, int) and g > 0 else ())
    kw.setdefault("nproc", default_nproc(mode, node_gpus))
    kw["dataset"] = _dataset(kw.get("dataset", RunConfig.dataset), given.get(FOLDER))
    kw["tags"] = _tags(kw.get("tags", ()))
    kw["sbatch_args"] = _lines(kw.get("sbatch_args", ()))
    try:
        kw["extra_env"] = _env(kw.get("extra_env", {}))
    except ConfigError as e:
        errors.append(e)
        kw["extra_env"] = {}
    for name in (
        "name",
        "rdzv_endpoint",
        "profile_steps",
        "partition",
        "time",
        "account",
        "resume",
    ):
        if isinstance(kw.get(name), str):
            kw[name] = kw[name].strip()
    return RunConfig(**kw), errors


def form_values(config: RunConfig) -> dict[str, Any]:
    """The form's starting values for ``config``: through ``run_config`` they give it back, once the
    disabled widgets' values are left out (``FormField.enabled``), as the page does."""
    out = {f.name: getattr(config, f.name) for f in dataclasses.fields(RunConfig)}
    kind, _, folder = (
        config.dataset.partition(":")
        if config.dataset.startswith(f"{IMAGEFOLDER}:")
        else (config.dataset, "", "")
    )
    out.update(
        dataset=kind,
        dataset_folder=folder,
        tags=", ".join(config.tags),
        extra_env="\n".join(f"{k}={v}" for k, v in config.extra_env.items()),
        sbatch_args="\n".join(config.sbatch_args),
    )
    # disabled then; it takes input for ddp on the CPU only (one per GPU otherwise)
    if config.mode != "ddp":
        out["nproc"] = default_nproc("ddp", ())
    return out


@dataclass(frozen=True)
class Preview:
    """What is shown before a launch: run it in ``cwd`` with ``env`` added (only what differs from
    now)."""

    preflight: list[str]
    argv: list[str]
    env: dict[str, str]
    other_nodes: list[list[str]]
    cwd: str
    sbatch: str = ""  # a Slurm run: the job script argv submits


def preview(
    config: RunConfig, snapshot: DeviceSnapshot, runs_root: Path | str | None = None
) -> Preview:
    """The pre-flight lines, the command (port and run id as placeholders), its environment, the
    other nodes'."""
    run_dir = root_or_default(runs_root) / RUN_ID_PLACEHOLDER
    argv, env = build_command(config, run_dir, PORT_PLACEHOLDER)
    changed = {k: v for k, v in sorted(env.items()) if os.environ.get(k) != v}
    if config.backend == SLURM:
        from lab.engine.slurm import job as slurm

        return Preview(
            slurm.preflight_lines(config, run_dir.parent),
            argv,
            changed,
            [],
            str(REPO_ROOT),
            slurm.build_sbatch(config, run_dir),
        )
    return Preview(
        preflight(config, snapshot),
        argv,
        changed,
        other_node_commands(config, run_dir),
        str(REPO_ROOT),
    )
