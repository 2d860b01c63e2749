"""The trainer's command line: options, and the checks that need no torch state.

Owns the argparse definition of ``python -m training.train`` (docs/contracts.md
section 1) and turns every bad input into one ``BadInput`` exception whose
message is a single line naming the fix; ``training.train.main`` prints it as
``error: ...`` and exits 2. Argparse's own errors (unknown choice, missing
``--log-dir``) are caught the same way so that no usage block or traceback
reaches the user. Checks that need torch or the data (devices, free memory,
dataset folders) live beside the code that owns them and raise ``BadInput``
too.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
from typing import Sequence

from training.options import (
    DDP_ONLY,
    FSDP_ONLY,
    KNOBS,
    MAX_BUCKET_MB,
    accumulation_problem,
    pairing_problem,
)

MODES = ("single", "dp", "ddp", "fsdp")
DISTRIBUTED = ("ddp", "fsdp")  # a process per device under torchrun, one process group


class BadInput(Exception):
    """A refused input; the message is one line that says what to do instead."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse would print the usage block and exit; we want one line.
        raise BadInput(message.replace("\n", " "))


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m training.train`` with the contract's defaults."""
    p = _Parser(
        prog="python -m training.train",
        description="Train an image classifier on one device or data-parallel: DataParallel, DDP "
        "or FSDP.",
    )
    p.add_argument("--mode", choices=MODES, default="single")
    p.add_argument(
        "--model",
        default="tinycnn",
        help="tinycnn, or any name of torchvision.models.list_models(module=torchvision.models)",
    )
    p.add_argument("--dataset", default="digits", help="digits | synthetic | imagefolder:PATH")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument(
        "--max-steps", type=int, default=0, help="stop after N optimizer steps (0 = no limit)"
    )
    p.add_argument("--batch-size", type=int, default=64, help="the global batch")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument(
        "--amp",
        action="store_true",
        help="CUDA: fp16 autocast + GradScaler (= --precision fp16); CPU: bf16 autocast",
    )
    _add_knobs(p)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-dir", required=True, help="the run folder; events under LOG_DIR/tb/")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--val-every", type=int, default=0, help="0 = at each epoch end")
    p.add_argument("--resume", default=None, help="a checkpoint file, or 'auto'")
    p.add_argument("--grad-norm-warn", type=float, default=0.0)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--checkpoint", choices=("last", "none"), default="last")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument(
        "--dist-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="ddp: how long a collective waits for the other ranks before it fails (default: "
        "PyTorch's)",
    )
    p.add_argument(
        "--profile-steps",
        default=None,
        metavar="A:B",
        help="torch.profiler over optimizer steps A to B-1 on every rank; traces and "
        "breakdown.json under LOG_DIR/profile/",
    )
    p.add_argument(
        "--stop-on-nan",
        action="store_true",
        help="end the run (exit 3) as soon as train/loss is NaN or infinite, instead of training "
        "on",
    )
    p.add_argument(
        "--data-delay-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="wait MS per training batch fetched: a slow input pipeline, simulated (workers "
        "overlap it)",
    )
    return p


def _add_knobs(p: argparse.ArgumentParser) -> None:
    """The performance options (precision, accumulation, memory format, compiling, DDP's and
    FSDP's own, the memory snapshot): one entry each in ``training.options.KNOBS``."""
    for option in KNOBS:
        option.add_to(p)


def torchrun_hint(argv: Sequence[str]) -> str:
    """The command that starts this same run under torchrun on two processes."""
    rest, skip = [], False
    # drop the user's --mode so the hint reads "... -m training.train --mode ddp ..."
    for a in argv:
        if skip:
            skip = False
        elif a == "--mode":
            skip = True
        elif not a.startswith("--mode="):
            rest.append(a)
    return shlex.join(
        [
            "python",
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "-m",
            "training.train",
            "--mode",
            "ddp",
            *rest,
        ]
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and check ``argv``; raise ``BadInput`` with one line on any refusal."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.batch_size <= 0:
        raise BadInput(f"--batch-size must be positive, got {args.batch_size}")
    if not args.lr > 0:
        raise BadInput(f"--lr must be positive, got {args.lr}")
    if args.epochs < 1 and args.max_steps <= 0:
        raise BadInput(
            f"--epochs is {args.epochs} and there is no --max-steps: use --epochs 1 or more"
        )
    if args.max_steps < 0:
        raise BadInput(f"--max-steps must be 0 (no limit) or positive, got {args.max_steps}")
    if args.log_every < 1:
        raise BadInput(f"--log-every must be 1 or more, got {args.log_every}")
    if args.val_every < 0:
        raise BadInput(f"--val-every must be 0 (each epoch end) or positive, got {args.val_every}")
    if args.workers < 0:
        raise BadInput(f"--workers must be 0 or more, got {args.workers}")
    if args.image_size < 4:
        raise BadInput(f"--image-size must be at least 4, got {args.image_size}")
    if args.grad_norm_warn < 0:
        raise BadInput(f"--grad-norm-warn must be 0 (off) or positive, got {args.grad_norm_warn}")
    if not args.log_dir.strip():
        raise BadInput("--log-dir is empty: name the run folder")
    parse_window(args.profile_steps)
    if args.dist_timeout is not None and not 0 < args.dist_timeout < math.inf:
        raise BadInput(
            f"--dist-timeout must be a positive number of seconds, got {args.dist_timeout}: e.g. "
            "600"
        )
    if not 0 <= args.data_delay_ms <= 60_000:
        raise BadInput(f"--data-delay-ms must be 0 (off) to 60000, got {args.data_delay_ms}")
    if args.memory_snapshot < 0:
        raise BadInput(
            f"--memory-snapshot must be 0 (off) or a number of steps, got {args.memory_snapshot}"
        )
    check_knobs(args)
    if args.mode in DISTRIBUTED and not ("RANK" in os.environ and "WORLD_SIZE" in os.environ):
        hint = torchrun_hint(argv).replace("--mode ddp", f"--mode {args.mode}")
        raise BadInput(f"--mode {args.mode} must be started by torchrun: {hint}")
    return args


def check_knobs(args: argparse.Namespace) -> None:
    """The performance options that need no device: DDP's and FSDP's own, accumulation,
    precision."""
    for names, mode, what in (
        (DDP_ONLY, "ddp", "DistributedDataParallel"),
        (FSDP_ONLY, "fsdp", "FSDP (fully_shard)"),
    ):
        for name in names:
            if getattr(args, name) not in (None, False) and args.mode != mode:
                flag = "--" + name.replace("_", "-")
                raise BadInput(
                    f"{flag} is an option of {what} and --mode {args.mode} has none: "
                    f"use --mode {mode} or leave it out"
                )
    if args.bucket_cap_mb is not None and not 0 < args.bucket_cap_mb <= MAX_BUCKET_MB:
        raise BadInput(
            f"--bucket-cap-mb must be above 0 and at most {MAX_BUCKET_MB}, got {args.bucket_cap_mb}"
        )
    problem = accumulation_problem(args) or pairing_problem(args)
    if problem:
        raise BadInput(problem)
    if args.amp and args.precision is not None:
        raise BadInput(
            "--amp is --precision fp16 (bf16 autocast on the CPU): give one of them, not both"
        )


def parse_window(text: str | None) -> tuple[int, int] | None:
    """``--profile-steps A:B`` as ``(A, B)``: steps A to B-1, counted from 1; ``None`` when not
    given."""
    if text is None:
        return None
    first, _, end = text.partition(":")
    try:
        a, b = int(first), int(end)  # no ":" leaves end empty, which int() refuses too
    except ValueError:
        raise BadInput(
            f"--profile-steps {text!r} is not A:B in whole steps: e.g. 20:25 profiles steps 20 to "
            "24"
        ) from None
    if a < 1:
        raise BadInput(
            f"--profile-steps {text}: steps count from 1, so start at 1 or later (e.g. "
            f"{max(b - 5, 1)}:{max(b, 2)})"
        )
    if b <= a:
        raise BadInput(
            f"--profile-steps {text}: B must be greater than A (the window is steps A to B-1), "
            f"e.g. {a}:{a + 5}"
        )
    return a, b


def split_batch(global_batch: int, parts: int, what: str) -> int:
    """``global_batch / parts``, or ``BadInput`` naming the nearest sizes that split."""
    if global_batch % parts == 0:
        return global_batch // parts
    lower = (global_batch // parts) * parts
    upper = lower + parts
    use = f"use {lower} or {upper}" if lower > 0 else f"use {upper}"
    raise BadInput(f"batch {global_batch} does not split over {parts} {what}: {use}")
