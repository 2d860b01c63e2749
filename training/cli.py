"""The trainer's command line: options, and the checks that need no torch state.

Owns the argparse parser of ``python -m training.train`` (docs/contracts.md
section 1), whose flags, and the range each is held to, are the entries of
``training.options.OPTIONS``, and turns every bad input into one ``BadInput``
exception whose message is a single line naming the fix; ``training.train.main`` prints it as
``error: ...`` and exits 2. Argparse's own errors (unknown choice, missing
``--log-dir``) are caught the same way so that no usage block or traceback
reaches the user. Checks that need torch or the data (devices, free memory,
dataset folders) live beside the code that owns them and raise ``BadInput``
too.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Sequence

from training.options import (
    DDP_ONLY,
    FSDP_ONLY,
    OPTIONS,
    accumulation_problem,
    pairing_problem,
    range_problem,
)

DISTRIBUTED = ("ddp", "fsdp")  # a process per device under torchrun, one process group
# the options of every mode; a mode's own ones are held to their ranges once given in their mode
_EVERY_MODES = tuple(o for o in OPTIONS if not o.only_in)
_MODES_OWN = tuple(o for o in OPTIONS if o.only_in)


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
    for option in OPTIONS:  # one entry each in training.options, in --help's order
        option.add_to(p)
    return p


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
    problem = range_problem(args, _EVERY_MODES)  # each option's range, as its entry declares it
    if problem:
        raise BadInput(problem)
    if args.epochs < 1 and args.max_steps <= 0:
        raise BadInput(
            f"--epochs is {args.epochs} and there is no --max-steps: use --epochs 1 or more"
        )
    if not args.log_dir.strip():
        raise BadInput("--log-dir is empty: name the run folder")
    parse_window(args.profile_steps)
    check_knobs(args)
    if args.mode in DISTRIBUTED and not ("RANK" in os.environ and "WORLD_SIZE" in os.environ):
        hint = torchrun_hint(argv).replace("--mode ddp", f"--mode {args.mode}")
        raise BadInput(f"--mode {args.mode} must be started by torchrun: {hint}")
    return args


def check_knobs(args: argparse.Namespace) -> None:
    """The performance options that need no device: DDP's and FSDP's own, accumulation,
    precision; DDP's and FSDP's options are held to their ranges here, once given in their mode
    (the other options' ranges are ``parse_args``')."""
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
    problem = range_problem(args, _MODES_OWN) or accumulation_problem(args) or pairing_problem(args)
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
