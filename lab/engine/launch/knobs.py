"""The performance knobs as the Launch form's fields (``FIELDS``, which
``lab.engine.launch.form.FIELDS`` takes in, in its "Performance knobs" section) and their checks
(``knob_problems``, one of ``lab.engine.launch.config``'s checks).

Each of the trainer's performance options is one entry in ``training.options.KNOBS`` (its flag,
choices, range and words); ``FIELDS`` builds the form's field of each from it, so the form, ``lab
launch``'s flags and ``--help``, Compare's words and ``--vary`` need nothing more of a new option
than that entry and its field in ``RunConfig`` (the run's value, with the lab's default). The
trainer is given a flag only when its value differs from that default. ``trainer_field`` makes
the field of any of the trainer's options (``training.options.OPTIONS``) from its entry: the
form's fields of the trainer's other options are built with it too, in the lab's words. The NCCL
preset is the lab's own (``lab.engine.spec.nccl``: its variables go into the run's environment).

Refused with one line where they make no sense: DDP's options outside ddp and FSDP's outside fsdp
(``ONLY_IN``), fp16 without a GPU, FSDP's CPU offload without a GPU, ``amp`` together with a
precision, an accumulation that does not divide each process's batch, DDP's static graph with
accumulation (PyTorch's reducer fails under ``no_sync()``), channels-last under fsdp
(``training.options.pairing_problem``), an unknown preset, a memory snapshot
(CUDA only) without a GPU.
"""

from __future__ import annotations

from typing import Any

from lab.engine.launch.field import FormField
from lab.engine.spec import backends, modes, nccl
from lab.engine.spec.modes import DDP, DP, FSDP, LABELS
from lab.engine.spec.run import RunConfig
from training import options as trainer
from training.options import COMPILE_WITH_DP, MAX_ACCUM, MAX_BUCKET_MB, ON_OFF, PRECISIONS

_DEFAULT = RunConfig()
ONLY_IN = {o.name: o.only_in for o in trainer.KNOBS if o.only_in}  # a mode's own options
STATIC_GRAPH_WITH_ACCUM = (
    f"DDP's static graph does not work with gradient accumulation "
    f"({trainer.STATIC_GRAPH_WITH_ACCUM}): leave out static graph or set accumulation steps to 1"
)

SYNC_BN_CPU = (
    "sync BatchNorm runs on GPUs only (nn.SyncBatchNorm wants CUDA inputs): choose GPUs or "
    "leave it out"
)


def trainer_field(name: str, label: str, key: str, **lab: Any) -> FormField:
    """The form field of the trainer's option ``name``: its flag, kind, choices and range from its
    entry in ``training.options``, so that they cannot drift from the trainer's; ``lab``: the
    form's and ``lab launch``'s own words and widget (e.g. ``kind="radio"``, ``cli_help``)."""
    o = trainer.BY_NAME[name]
    declared: dict[str, Any] = dict(
        kind=o.kind,
        options=o.choices,
        step=o.step,
        only_if=("mode", o.only_in) if o.only_in else None,
        trainer_flag=o.flag,
        limits=o.limits,
        unit=o.unit,
    )
    return FormField(name=name, label=label, key=key, **(declared | lab))


def _field(o: trainer.Option) -> FormField:
    """The form field of one of the performance options: its entry's words too."""
    return trainer_field(
        o.name,
        o.label,
        f"launch_{o.name}",
        help=o.form_help,
        option_labels=o.choice_labels,
        cli_help=o.help,
        differs=o.differs,
        cause=o.cause,
        vary_example=o.vary_example,
    )


# the trainer's options, then the lab's own NCCL preset (its variables go into the environment)
FIELDS: tuple[FormField, ...] = (
    *(_field(o) for o in trainer.KNOBS),
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
    pairing = trainer.pairing_problem(c)
    if pairing:
        out.append(("channels_last", pairing))
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
