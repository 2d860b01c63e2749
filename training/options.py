"""Every option of the trainer, declared once for the trainer and the lab: ``OPTIONS``, and
among them the performance options, ``KNOBS``.

Each ``Option`` is one entry: its flag, kind, choices, default, the trainer's range of it
(``Range``, with its refusal) and the words that explain it (the command line's, the Launch
form's label and help, Compare's words when two runs differ in it, ``--vary``'s example).
``python -m training.train`` adds every flag from ``OPTIONS`` and refuses a value outside its
range from it (``training.cli``); the lab's Launch form, ``lab launch``'s flags and ``--help``, its
checks and ``--vary`` build their fields from the same entries (``lab.engine.launch.knobs``), so a
new option is one entry here plus the code that uses it, and a limit cannot drift between the form
and the trainer. Plain values and the trainer's checks of them that need no device
(``range_problem``, ``accumulation_problem``, ``pairing_problem``), no torch: the lab's supervisor
imports nothing heavy through it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

MODES = ("single", "dp", "ddp", "fsdp")  # --mode
CHECKPOINTS = ("last", "none")  # --checkpoint: keep the last epoch's, or write none
DEVICES = ("auto", "cpu", "cuda")  # --device
PRECISIONS = ("fp32", "fp16", "bf16")
ON_OFF = ("on", "off")  # --reshard-after-forward: on = ZeRO-3 (the default), off = ZeRO-2-like
# --compile on|off (torch.compile, every mode): why DataParallel on two GPUs or more refuses it
COMPILE_WITH_DP = "its replicas of a compiled module do not run their own parameters"
MAX_ACCUM = 1024  # --accum-steps: 1 (none) to this many micro-batches per optimizer step
MAX_BUCKET_MB = 10_000  # --bucket-cap-mb: above 0 (the lab's 0: DDP's 25) up to this
MAX_SNAPSHOT_STEPS = 10_000  # the form's range of --memory-snapshot; the trainer takes any N
MAX_DATA_DELAY_MS = 60_000  # --data-delay-ms: 0 (off) to a minute per batch
# DDP(static_graph=True) with no_sync() fails at the first backward (expect_autograd_hooks_
# INTERNAL ASSERT, reducer.cpp; pytorch/pytorch#143580, huggingface/accelerate#3679)
STATIC_GRAPH_WITH_ACCUM = "no_sync() fails its first backward"  # why both refuse the pair
# FSDP2's fully_shard refuses parameters that are not contiguous ("FSDP does not support
# non-contiguous parameters yet", torch/distributed/fsdp/_fully_shard/_fsdp_param.py), and each
# all-gather rebuilds a block's parameters contiguous: a channels-last model cannot be sharded
FSDP_CHANNELS_LAST = (
    "--channels-last does not work with --mode fsdp (FSDP2 shards contiguous parameters only): "
    "use --mode ddp for channels-last, or leave out --channels-last"
)
_DDP_OPTIONS = "DDP options differ"  # the count of Compare's notes: DDP's switches as one cause


@dataclass(frozen=True)
class Range:
    """The trainer's range of a number option: from ``lo`` to ``hi`` (``None``: no bound; an
    ``open`` end refuses the bound itself, as "above 0" does), and its refusal, said after the
    flag with ``{}`` the value given."""

    refusal: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def admits(self, value: float) -> bool:
        # each comparison is written as "within", so that NaN (never within) is refused
        above = self.lo is None or (value > self.lo if self.lo_open else value >= self.lo)
        below = self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)
        return above and below


@dataclass(frozen=True)
class Option:
    """One option of the trainer: its flag ``--<name with dashes>`` (argparse's dest and the
    lab's field are ``name``), and its words.

    ``kind``: "select" (one of ``choices``), "int", "float", "text" or "check" (a switch).
    ``default`` is the trainer's when the flag is not given (the lab passes a performance option's
    flag only when its value differs from the run's default). ``check``: the trainer's range, and
    its refusal (a value of ``None``, the option not given, is not checked). ``only_in``: the one
    mode whose option it is (refused elsewhere). ``limits``: the form's range, in ``unit``.
    ``differs``/``cause``: Compare's words and count of notes when two runs differ in it (empty:
    it does not change a step's speed).
    """

    name: str
    kind: str
    help: str | None = None  # the command line's words: the trainer's --help and lab launch --help
    label: str = ""  # the Launch form's
    form_help: str = ""  # the Launch form's, where a sentence more fits
    default: Any = None
    required: bool = False
    check: Range | None = None
    choices: tuple[str, ...] = ()
    choice_labels: tuple[str, ...] = ()  # the form's words for each choice
    metavar: str | None = None
    only_in: str | None = None
    limits: tuple[float, float] | None = None
    unit: str = ""
    step: float = 1
    differs: str = ""
    cause: str = ""
    vary_example: str = ""  # the values a refused --vary suggests, where the default's do not
    # the option matrix (``training.matrix``): the values it tries (the first is the run's
    # default), and those of them that need CUDA (tried by ``scripts/gpu_check.py --matrix`` only)
    matrix: tuple[Any, ...] = ()
    gpu_only: tuple[Any, ...] = ()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """The trainer's flag for this option."""
        if self.kind == "check":
            parser.add_argument(self.flag, action="store_true", help=self.help)
            return
        kw: dict[str, Any] = {"default": self.default, "help": self.help}
        if self.kind == "select":
            kw["choices"] = self.choices
        elif self.kind in ("int", "float"):
            kw["type"] = int if self.kind == "int" else float
        if self.metavar:
            kw["metavar"] = self.metavar
        if self.required:
            kw["required"] = True
        parser.add_argument(self.flag, **kw)

    def problem(self, value: Any) -> str | None:
        """The trainer's one line refusing ``value``, or None: outside ``check``'s range."""
        if self.check is None or value is None or self.check.admits(value):
            return None
        return f"{self.flag} {self.check.refusal.format(value)}"


KNOBS: tuple[Option, ...] = (
    Option(
        "precision",
        "select",
        "fp32 (default) | fp16 (autocast + GradScaler, CUDA only) | bf16 (autocast, CPU or CUDA); "
        "--amp is fp16 on CUDA, bf16 on the CPU: give one of them",
        "Precision",
        "fp16: autocast with a GradScaler, CUDA only; bf16: autocast, on the CPU or a GPU of "
        "compute capability 8.0 or more (Ampere; the trainer refuses older ones). The AMP box is "
        "fp16 on CUDA and bf16 on the CPU: use one of the two.",
        choices=PRECISIONS,
        choice_labels=(
            "fp32",
            "fp16 — autocast + GradScaler (CUDA only)",
            "bf16 — autocast (CPU or CUDA)",
        ),
        matrix=(None, "bf16", "fp16"),
        gpu_only=("fp16",),
    ),
    Option(
        "accum_steps",
        "int",
        "N micro-batches per optimizer step (default 1: none); the global batch stays the "
        "step's, each micro-batch is global/N (per ddp rank global/(N x world)); ddp "
        "all-reduces once per step, the first N-1 inside no_sync()",
        "Accumulation steps (micro-batches per step)",
        "Gradient accumulation: each optimizer step runs this many micro-batches of global batch "
        "/ (N × world size) per process; DDP all-reduces once, after the last (the others run "
        "inside no_sync()). The global batch stays the optimizer step's batch.",
        default=1,
        check=Range(f"must be 1 (none) to {MAX_ACCUM}, got {{}}", 1, MAX_ACCUM),
        metavar="N",
        differs="accumulation steps",
        cause="accumulation differs",
        vary_example="1,4",
        matrix=(1, 2),
    ),
    Option(
        "channels_last",
        "check",
        "the model and its image batches in torch.channels_last",
        "Channels last (memory format)",
        "The model and its image batches in torch.channels_last.",
        differs="memory format (channels last)",
        cause="memory format differs",
        matrix=(False, True),
    ),
    Option(
        "bucket_cap_mb",
        "float",
        "ddp: DDP's bucket_cap_mb, the gradient bucket size in MB (default: DDP's 25; lab "
        "launch's 0 means the same)",
        "DDP bucket size (MB, 0 = DDP's 25)",
        "DDP's bucket_cap_mb: gradients are all-reduced in buckets of about this size.",
        check=Range(
            f"must be above 0 and at most {MAX_BUCKET_MB}, got {{}}", 0, MAX_BUCKET_MB, lo_open=True
        ),
        metavar="MB",
        only_in="ddp",
        step=5.0,
        differs="DDP bucket size (MB)",
        cause="DDP bucket size differs",
        vary_example="1,25,100",
    ),
    Option(
        "grad_as_bucket_view",
        "check",
        "ddp: gradient_as_bucket_view=True (gradients are views into the buckets)",
        "Gradients as bucket views",
        "DDP's gradient_as_bucket_view=True: gradients are views into the buckets (less memory, "
        "no copy).",
        only_in="ddp",
        differs="DDP's gradients as bucket views",
        cause=_DDP_OPTIONS,
    ),
    Option(
        "static_graph",
        "check",
        "ddp: static_graph=True (the used parameters never change between steps; not with "
        "--accum-steps)",
        "Static graph",
        "DDP's static_graph=True: the set of used parameters never changes between steps.",
        only_in="ddp",
        differs="DDP's static graph",
        cause=_DDP_OPTIONS,
        matrix=(False, True),
    ),
    Option(
        "find_unused_parameters",
        "check",
        "ddp: find_unused_parameters=True (for models whose forward skips parameters; costs a "
        "graph walk per step)",
        "Find unused parameters",
        "DDP's find_unused_parameters=True: for models whose forward skips some parameters (costs "
        "a graph walk every step).",
        only_in="ddp",
        differs="DDP's find unused parameters",
        cause=_DDP_OPTIONS,
    ),
    Option(
        "sync_bn",
        "check",
        "ddp, GPUs: nn.SyncBatchNorm.convert_sync_batchnorm before the wrap (BatchNorm "
        "statistics over every rank's batch)",
        "Sync BatchNorm",
        "nn.SyncBatchNorm.convert_sync_batchnorm before DDP's wrap: BatchNorm statistics over the "
        "global batch, not each rank's (GPUs only; costs a collective per BatchNorm layer).",
        only_in="ddp",
        differs="sync BatchNorm",
        cause=_DDP_OPTIONS,
        matrix=(False, True),
        gpu_only=(True,),
    ),
    Option(
        "reshard_after_forward",
        "select",
        "fsdp: on (the default: ZeRO-3) frees each block's gathered parameters after its "
        "forward; off keeps them until its backward (ZeRO-2-like: more memory, one all-gather "
        "less)",
        "Reshard after forward (FSDP)",
        "fully_shard's reshard_after_forward: on (the default) all-gathers each block's "
        "parameters again for its backward; off keeps them gathered in between.",
        choices=ON_OFF,
        choice_labels=(
            "on — free each block's gathered parameters after its forward (ZeRO-3)",
            "off — keep them until its backward (ZeRO-2-like: more memory, one all-gather less)",
        ),
        only_in="fsdp",
        differs="FSDP's reshard after forward",
        matrix=(None, "off"),
    ),
    Option(
        "fsdp_cpu_offload",
        "check",
        "fsdp, GPUs: keep the sharded parameters, gradients and optimizer step on the CPU",
        "CPU offload (FSDP)",
        "FSDP's CPUOffloadPolicy: the sharded parameters, gradients and optimizer step live on "
        "the CPU (GPUs only; much less GPU memory, much slower).",
        only_in="fsdp",
        differs="FSDP's CPU offload",
        matrix=(False, True),
        gpu_only=(True,),
    ),
    Option(
        "compile",
        "select",
        "off (default) | on: torch.compile the model (every mode; dp on 2+ GPUs refused); the "
        "first step(s), which compile, are timed apart (perf/compile_s) and left out of the "
        "steady throughput",
        "torch.compile",
        "torch.compile the model. The first steps pay the compilation; the run reports that "
        "time apart and its steady-state throughput leaves it out, so compile can be A/B'd.",
        default="off",
        choices=ON_OFF[::-1],
        choice_labels=("off", "on — compile the model (its compile time is shown apart)"),
        differs="torch.compile",
        matrix=("off", "on"),
    ),
    Option(
        "memory_snapshot",
        "int",
        "CUDA only: record the caching allocator's history over the first N steps into the run "
        "folder's profile/memory_snapshot_rank<i>.pickle (open at pytorch.org/memory_viz; "
        "default 0: off)",
        "Memory snapshot (first N steps, 0 = off)",
        "Record the CUDA caching allocator's history over the first N steps into "
        "profile/memory_snapshot_rank<i>.pickle (download it on Live, open it at "
        "https://pytorch.org/memory_viz). CUDA only.",
        default=0,
        check=Range("must be 0 (off) or a number of steps, got {}", 0),
        metavar="N",
        limits=(0, MAX_SNAPSHOT_STEPS),
        unit="steps",
    ),
)
# what is trained, on what and for how long: the trainer's flags before the performance options
_TRAINING: tuple[Option, ...] = (
    Option("mode", "select", default="single", choices=MODES),
    Option(
        "model",
        "text",
        "tinycnn, tinyresnet, tinyvit, tinymobilenet, tinyconvnext (small, for a CPU), or any "
        "name of torchvision.models.list_models(module=torchvision.models)",
        default="tinycnn",
    ),
    Option("dataset", "text", "digits | synthetic | imagefolder:PATH", default="digits"),
    Option("epochs", "int", default=1),
    Option(
        "max_steps",
        "int",
        "stop after N optimizer steps (0 = no limit)",
        default=0,
        check=Range("must be 0 (no limit) or positive, got {}", 0),
    ),
    Option(
        "batch_size",
        "int",
        "the global batch",
        default=64,
        check=Range("must be positive, got {}", 0, lo_open=True),
    ),
    Option("lr", "float", default=0.05, check=Range("must be positive, got {}", 0, lo_open=True)),
    Option(
        "amp", "check", "CUDA: fp16 autocast + GradScaler (= --precision fp16); CPU: bf16 autocast"
    ),
)
# data loading, logging, validation, checkpoints, the device and what helps find a problem: the
# trainer's flags after the performance options
_HOUSEKEEPING: tuple[Option, ...] = (
    Option("workers", "int", default=0, check=Range("must be 0 or more, got {}", 0)),
    Option("seed", "int", default=0),
    Option("log_dir", "text", "the run folder; events under LOG_DIR/tb/", required=True),
    Option("log_every", "int", default=10, check=Range("must be 1 or more, got {}", 1)),
    Option(
        "val_every",
        "int",
        "0 = at each epoch end",
        default=0,
        check=Range("must be 0 (each epoch end) or positive, got {}", 0),
    ),
    Option("resume", "text", "a checkpoint file, or 'auto'"),
    Option(
        "grad_norm_warn",
        "float",
        default=0.0,
        check=Range("must be 0 (off) or positive, got {}", 0),
    ),
    Option("image_size", "int", default=32, check=Range("must be at least 4, got {}", 4)),
    Option("checkpoint", "select", default="last", choices=CHECKPOINTS),
    Option("device", "select", default="auto", choices=DEVICES),
    Option(
        "dist_timeout",
        "float",
        "ddp: how long a collective waits for the other ranks before it fails (default: PyTorch's)",
        metavar="SECONDS",
        check=Range(
            "must be a positive number of seconds, got {}: e.g. 600",
            0,
            float("inf"),
            lo_open=True,
            hi_open=True,
        ),
    ),
    Option(
        "profile_steps",
        "text",
        "torch.profiler over optimizer steps A to B-1 on every rank; traces and "
        "breakdown.json under LOG_DIR/profile/",
        metavar="A:B",
    ),
    Option(
        "stop_on_nan",
        "check",
        "end the run (exit 3) as soon as train/loss is NaN or infinite, instead of training on",
    ),
    Option(
        "data_delay_ms",
        "float",
        "wait MS per training batch fetched: a slow input pipeline, simulated (workers overlap it)",
        default=0.0,
        check=Range(f"must be 0 (off) to {MAX_DATA_DELAY_MS}, got {{}}", 0, MAX_DATA_DELAY_MS),
        metavar="MS",
        limits=(0, MAX_DATA_DELAY_MS),
        unit="ms per batch",
    ),
)
# every flag of ``python -m training.train``, in its --help's order
OPTIONS: tuple[Option, ...] = (*_TRAINING, *KNOBS, *_HOUSEKEEPING)
BY_NAME = {o.name: o for o in OPTIONS}
# a mode's own options: refused in the other modes
DDP_ONLY = tuple(o.name for o in KNOBS if o.only_in == "ddp")
FSDP_ONLY = tuple(o.name for o in KNOBS if o.only_in == "fsdp")


def range_problem(args: Any, options: tuple[Option, ...] = OPTIONS) -> str | None:
    """The first of ``options`` whose value in ``args`` (the trainer's parsed arguments) is outside
    its range: the trainer's refusal (``training.cli``, which holds a mode's own options to their
    ranges after it refused them outside their mode)."""
    for option in options:
        problem = option.problem(getattr(args, option.name))
        if problem:
            return problem
    return None


def accumulation_problem(args: Any) -> str | None:
    """``--accum-steps`` beside ``--static-graph``: the trainer's refusal
    (``training.cli.check_knobs``, after ``range_problem`` held the steps to 1 to ``MAX_ACCUM``;
    the lab's form says it in its words, ``lab.engine.launch.knobs``, from the same limits)."""
    if args.static_graph and args.accum_steps > 1:
        return (
            f"--static-graph does not work with --accum-steps {args.accum_steps} "
            f"(DDP's {STATIC_GRAPH_WITH_ACCUM}): leave out --static-graph or use --accum-steps 1"
        )
    return None


def pairing_problem(args: Any) -> str | None:
    """Two options that cannot meet, whatever the devices: the trainer's refusal
    (``training.cli.check_knobs``) and the lab's (``lab.engine.launch.knobs``), in one line."""
    if args.mode == "fsdp" and args.channels_last:
        return FSDP_CHANNELS_LAST
    return None
