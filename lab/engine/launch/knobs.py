"""The performance knobs: precision, gradient accumulation, memory format, DDP's and FSDP's own
options, torch.compile and an NCCL preset, declared once (``FIELDS``, which
``lab.engine.launch.form.FIELDS`` takes in, in its "Performance knobs" section) and checked
(``knob_problems``, one of ``lab.engine.launch.config``'s checks).

The trainer's flags are passed only when set (``FormField.trainer_flag``): ``--precision``,
``--accum-steps``, ``--channels-last``, ``--bucket-cap-mb``, ``--grad-as-bucket-view``,
``--static-graph``, ``--find-unused-parameters``, ``--sync-bn``, ``--reshard-after-forward``,
``--fsdp-cpu-offload`` and ``--compile``; the NCCL preset is the lab's own
(``lab.engine.spec.nccl``: its variables go into the run's environment). Refused with one line
where they make no sense: DDP's options outside ddp and FSDP's outside fsdp (``ONLY_IN``), fp16
without a GPU, FSDP's CPU offload without a GPU, ``amp`` together with a precision, an
accumulation that does not divide each process's batch, DDP's static graph with accumulation
(PyTorch's reducer fails under ``no_sync()``), an unknown preset, a memory snapshot
(``--memory-snapshot N``, CUDA only) without a GPU.
"""

from __future__ import annotations

from typing import Any

from lab.engine.launch.field import FormField
from lab.engine.spec import backends, modes, nccl
from lab.engine.spec.modes import DDP, DP, FSDP, LABELS
from lab.engine.spec.run import RunConfig
from training import options as trainer
from training.options import (
    COMPILE_WITH_DP,
    DDP_ONLY,
    FSDP_ONLY,
    MAX_ACCUM,
    MAX_BUCKET_MB,
    ON_OFF,
    PRECISIONS,
)

MAX_SNAPSHOT_STEPS = 10_000  # the form's range; the trainer takes any N
_DDP, _FSDP = ("mode", DDP), ("mode", FSDP)
_DDP_OPTIONS = "DDP options differ"  # the count of Compare's notes: DDP's switches as one cause
# a mode's own options: refused in the other modes, and a sweep varies them in that mode's runs
ONLY_IN = {**{name: DDP for name in DDP_ONLY}, **{name: FSDP for name in FSDP_ONLY}}
_DEFAULT = RunConfig()
STATIC_GRAPH_WITH_ACCUM = (
    f"DDP's static graph does not work with gradient accumulation "
    f"({trainer.STATIC_GRAPH_WITH_ACCUM}): leave out static graph or set accumulation steps to 1"
)

SYNC_BN_CPU = (
    "sync BatchNorm runs on GPUs only (nn.SyncBatchNorm wants CUDA inputs): choose GPUs or "
    "leave it out"
)

FIELDS: tuple[FormField, ...] = (
    FormField(
        "precision",
        "Precision",
        "select",
        "launch_precision",
        options=PRECISIONS,
        option_labels=(
            "fp32",
            "fp16 — autocast + GradScaler (CUDA only)",
            "bf16 — autocast (CPU or CUDA)",
        ),
        help="fp16: autocast with a GradScaler, CUDA only; bf16: autocast, on the CPU or a GPU "
        "of compute capability 8.0 or more (Ampere; the trainer refuses older ones). The AMP box "
        "is fp16 on CUDA and bf16 on the CPU: use one of the two.",
        cli_help="fp32 (default) | fp16 (autocast + GradScaler, CUDA only) | bf16 (autocast, CPU "
        "or CUDA); --amp is fp16 on CUDA, bf16 on the CPU: give one of them",
        trainer_flag="--precision",
    ),
    FormField(
        "accum_steps",
        "Accumulation steps (micro-batches per step)",
        "int",
        "launch_accum",
        help="Gradient accumulation: each optimizer step runs this many micro-batches of global "
        "batch / (N × world size) per process; DDP all-reduces once, after the last (the others "
        "run inside no_sync()). The global batch stays the optimizer step's batch.",
        cli_help="N micro-batches per optimizer step (default 1: none); the global batch stays "
        "the step's, each micro-batch is global/N (per ddp rank global/(N x world)); ddp "
        "all-reduces once per step (no_sync)",
        trainer_flag="--accum-steps",
        differs="accumulation steps",
        cause="accumulation differs",
        vary_example="1,4",
    ),
    FormField(
        "channels_last",
        "Channels last (memory format)",
        "check",
        "launch_channels_last",
        help="The model and its image batches in torch.channels_last.",
        cli_help="the model and its image batches in torch.channels_last",
        trainer_flag="--channels-last",
        differs="memory format (channels last)",
        cause="memory format differs",
    ),
    FormField(
        "bucket_cap_mb",
        "DDP bucket size (MB, 0 = DDP's 25)",
        "float",
        "launch_bucket_mb",
        step=5.0,
        only_if=_DDP,
        help="DDP's bucket_cap_mb: gradients are all-reduced in buckets of about this size.",
        cli_help="ddp: the gradient bucket size in MB, DDP's bucket_cap_mb (default 0: DDP's 25)",
        trainer_flag="--bucket-cap-mb",
        differs="DDP bucket size (MB)",
        cause="DDP bucket size differs",
        vary_example="1,25,100",
    ),
    FormField(
        "grad_as_bucket_view",
        "Gradients as bucket views",
        "check",
        "launch_bucket_view",
        only_if=_DDP,
        help="DDP's gradient_as_bucket_view=True: gradients are views into the buckets (less "
        "memory, no copy).",
        cli_help="ddp: gradient_as_bucket_view=True (gradients are views into the buckets)",
        trainer_flag="--grad-as-bucket-view",
        differs="DDP's gradients as bucket views",
        cause=_DDP_OPTIONS,
    ),
    FormField(
        "static_graph",
        "Static graph",
        "check",
        "launch_static_graph",
        only_if=_DDP,
        help="DDP's static_graph=True: the set of used parameters never changes between steps.",
        cli_help="ddp: static_graph=True (the used parameters never change between steps; not "
        "with --accum-steps)",
        trainer_flag="--static-graph",
        differs="DDP's static graph",
        cause=_DDP_OPTIONS,
    ),
    FormField(
        "find_unused_parameters",
        "Find unused parameters",
        "check",
        "launch_find_unused",
        only_if=_DDP,
        help="DDP's find_unused_parameters=True: for models whose forward skips some parameters "
        "(costs a graph walk every step).",
        cli_help="ddp: find_unused_parameters=True (for models whose forward skips parameters; "
        "costs a graph walk per step)",
        trainer_flag="--find-unused-parameters",
        differs="DDP's find unused parameters",
        cause=_DDP_OPTIONS,
    ),
    FormField(
        "sync_bn",
        "Sync BatchNorm",
        "check",
        "launch_sync_bn",
        only_if=_DDP,
        help="nn.SyncBatchNorm.convert_sync_batchnorm before DDP's wrap: BatchNorm statistics over "
        "the global batch, not each rank's (GPUs only; costs a collective per BatchNorm layer).",
        cli_help="ddp, GPUs: BatchNorm statistics over every rank's batch (nn.SyncBatchNorm)",
        trainer_flag="--sync-bn",
        differs="sync BatchNorm",
        cause=_DDP_OPTIONS,
    ),
    FormField(
        "reshard_after_forward",
        "Reshard after forward (FSDP)",
        "select",
        "launch_reshard",
        options=ON_OFF,
        option_labels=(
            "on — free each block's gathered parameters after its forward (ZeRO-3)",
            "off — keep them until its backward (ZeRO-2-like: more memory, one all-gather less)",
        ),
        only_if=_FSDP,
        help="fully_shard's reshard_after_forward: on (the default) all-gathers each block's "
        "parameters again for its backward; off keeps them gathered in between.",
        cli_help="fsdp: on (default: ZeRO-3) frees each block's gathered parameters after its "
        "forward; off keeps them until its backward (ZeRO-2-like)",
        trainer_flag="--reshard-after-forward",
        differs="FSDP's reshard after forward",
    ),
    FormField(
        "fsdp_cpu_offload",
        "CPU offload (FSDP)",
        "check",
        "launch_fsdp_offload",
        only_if=_FSDP,
        help="FSDP's CPUOffloadPolicy: the sharded parameters, gradients and optimizer step live "
        "on the CPU (GPUs only; much less GPU memory, much slower).",
        cli_help="fsdp, GPUs: the sharded parameters, gradients and optimizer step on the CPU",
        trainer_flag="--fsdp-cpu-offload",
        differs="FSDP's CPU offload",
    ),
    FormField(
        "compile",
        "torch.compile",
        "select",
        "launch_compile",
        options=ON_OFF[::-1],
        option_labels=("off", "on — compile the model (its compile time is shown apart)"),
        help="torch.compile the model. The first steps pay the compilation; the run reports that "
        "time apart and its steady-state throughput leaves it out, so compile can be A/B'd.",
        cli_help="off (default) | on: torch.compile the model; the compile time is reported "
        "apart from the steady-state throughput",
        trainer_flag="--compile",
        differs="torch.compile",
    ),
    FormField(
        "nccl_preset",
        "NCCL preset",
        "select",
        "launch_nccl_preset",
        options=("",) + nccl.NAMES,
        option_labels=("none",) + tuple(nccl.describe(n) for n in nccl.NAMES),
        help="A named set of NCCL environment variables (starting points from the seeds, to be "
        "measured); recorded in run.json. No effect on the CPU (gloo).",
        cli_help=f"a named set of NCCL variables: {', '.join(nccl.NAMES)} (docs/cli.md; "
        "starting points to measure, no effect under gloo)",
    ),
    FormField(
        "memory_snapshot",
        "Memory snapshot (first N steps, 0 = off)",
        "int",
        "launch_memory_snapshot",
        help="Record the CUDA caching allocator's history over the first N steps into "
        "profile/memory_snapshot_rank<i>.pickle (download it on Live, open it at "
        "https://pytorch.org/memory_viz). CUDA only.",
        cli_help="CUDA only: record the caching allocator's history over the first N steps into "
        "profile/memory_snapshot_rank<i>.pickle (open at pytorch.org/memory_viz; default 0: off)",
        trainer_flag="--memory-snapshot",
        limits=(0, MAX_SNAPSHOT_STEPS),
        unit="steps",
    ),
)


# where the knobs sit in the form's "Performance knobs" section (``form.LAYOUT``'s rows)
ROWS: list[list[str | tuple[str, ...]]] = [
    ["precision", "accum_steps", ("channels_last", "compile")],
    ["bucket_cap_mb", ("grad_as_bucket_view", "static_graph", "find_unused_parameters", "sync_bn")],
    ["reshard_after_forward", "fsdp_cpu_offload"],
    ["nccl_preset", "memory_snapshot"],
]


def _has_gpus(c: Any) -> bool:
    return backends.of(c).node_gpus(c) > 0


def _whole(value: object, lo: float, hi: float) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def _accum_problem(c: Any) -> str | None:
    n, b = c.accum_steps, c.batch_size
    if not _whole(n, 1, MAX_ACCUM):
        return f"accumulation steps {n} must be 1 (none) to {MAX_ACCUM}"
    world = c.world_size if _whole(c.nproc, 1, float("inf")) else 0
    if n == 1 or world < 1 or not _whole(b, 1, float("inf")) or b % world:
        return None  # the batch's own check speaks
    per = b // world if modes.torchrun(c.mode) else b
    if per % n:
        fits = ", ".join(str(d) for d in range(1, min(per, 64) + 1) if per % d == 0)
        where = (
            f"per rank ({b} over {world})" if modes.torchrun(c.mode) and world > 1 else "per step"
        )
        return f"{n} does not divide the batch of {per} {where}: use one of {fits}"
    if c.mode == DP and world > 1 and (per // n) % world:
        return (
            f"{n} makes micro-batches of {per // n}, which do not split over {world} GPUs "
            "(DataParallel): use fewer accumulation steps or a larger batch"
        )
    return None


def knob_problems(c: Any) -> list[tuple[str, str]]:
    """(field, message) for each knob of a ``RunConfig`` that is unknown, out of range or makes
    no sense for its mode or devices."""
    out: list[tuple[str, str]] = []
    if c.precision not in PRECISIONS:
        out.append(("precision", f"unknown precision {c.precision!r}: use fp32, fp16 or bf16"))
    elif c.precision == "fp16" and not _has_gpus(c):
        out.append(
            (
                "precision",
                "fp16 needs CUDA (autocast with a GradScaler) and this run has no GPU: use bf16 "
                "on the CPU, or choose GPUs",
            )
        )
    if c.amp and c.precision != "fp32":
        out.append(
            ("amp", "the same as precision fp16 (bf16 on the CPU): give amp or precision, not both")
        )
    cap = c.bucket_cap_mb
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0 <= cap <= MAX_BUCKET_MB:
        out.append(
            ("bucket_cap_mb", f"bucket size {cap} must be 0 (DDP's 25 MB) to {MAX_BUCKET_MB} MB")
        )
    for name, mode in ONLY_IN.items():
        if getattr(c, name) != getattr(_DEFAULT, name) and c.mode != mode:
            out.append(
                (
                    name,
                    f"an option of {LABELS[mode]}, and mode {c.mode} has none: use mode {mode} or "
                    "leave it out",
                )
            )
    if c.fsdp_cpu_offload and c.mode == FSDP and not _has_gpus(c):
        out.append(
            (
                "fsdp_cpu_offload",
                "CPU offload moves the shards off the GPUs and this run has none: choose GPUs or "
                "leave it out",
            )
        )
    for name in ("reshard_after_forward", "compile"):
        if getattr(c, name) not in ON_OFF:
            out.append((name, f"{getattr(c, name)!r} is not on or off: use on or off"))
    if c.compile == "on" and c.mode == DP and backends.of(c).node_gpus(c) >= 2:
        out.append(
            (
                "compile",
                f"torch.compile does not work under DataParallel ({COMPILE_WITH_DP}): use mode "
                "ddp to compile on several GPUs, or leave compile off",
            )
        )
    accum = _accum_problem(c)
    if accum:
        out.append(("accum_steps", accum))
    elif c.static_graph and c.mode == DDP and _whole(c.accum_steps, 2, MAX_ACCUM):
        out.append(("static_graph", STATIC_GRAPH_WITH_ACCUM))
    if c.sync_bn and c.mode == DDP and not _has_gpus(c):
        out.append(("sync_bn", SYNC_BN_CPU))
    if c.memory_snapshot and not _has_gpus(c):
        out.append(
            (
                "memory_snapshot",
                "a memory snapshot records CUDA memory and this run has no GPU: choose GPUs or "
                "set it to 0",
            )
        )
    preset = nccl.preset_problem(c.nccl_preset, c.nnodes)
    if preset:
        out.append(("nccl_preset", preset))
    return out
