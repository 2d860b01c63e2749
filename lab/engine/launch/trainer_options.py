"""The checks of the trainer's own options: its numbers, its data set and its profile window.

What ``training.train`` is asked to do beyond where it runs: batch size, epochs, steps, learning
rate, workers, seed, logging, image size, gradient warning, checkpoint, ``--profile-steps``, the
data set (``digits``, ``synthetic`` or ``imagefolder:PATH``) and the options of a run that goes
wrong (the stall threshold, restarts, a resume; a range declared with its option, as the
simulated input delay's, is checked by ``form.limit_problems``). Each check returns
``(field, message)`` pairs, the message naming the fix; ``lab.engine.launch.config.problems`` turns
them into ``ConfigError`` beside its checks of devices, nodes and backend (this module imports
nothing of it, so both can be imported first). The names of the data sets and checkpoint choices
live here; callers import them from here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lab.engine.spec import modes
from lab.runfolder import DIGITS, is_checkpoint

CHECKPOINTS = ("last", "none")
# the named sets; a folder of images is given as imagefolder:PATH
DATASETS = ("digits", "synthetic")
IMAGEFOLDER = "imagefolder"


def dataset_problem(spec: str) -> str | None:
    """What is wrong with a data set spec (the ``dataset`` field's message), or None."""
    if spec in DATASETS:
        if spec == "digits" and not DIGITS.is_dir():
            return (
                f"the digits sample set is missing at {DIGITS}: "
                "restore sample_data/ or use 'synthetic'"
            )
        return None
    if spec.startswith(f"{IMAGEFOLDER}:"):
        raw = spec.split(":", 1)[1].strip()
        if not raw:  # Path("") is ".", which would quietly mean the current folder
            return "no image folder given: give an existing folder as imagefolder:PATH"
        path = Path(raw).expanduser()
        if not path.is_dir():
            return (
                f"image folder {str(path)!r} does not exist: "
                "give an existing folder as imagefolder:PATH"
            )
        return None
    return f"unknown dataset {spec!r}: use digits, synthetic or imagefolder:PATH"


def number_problems(c: Any) -> list[tuple[str, str]]:
    """(field, message) for each of a ``RunConfig``'s trainer numbers and choices that is out of
    range."""
    out: list[tuple[str, str]] = []

    def need(ok: bool, fld: str, msg: str) -> None:
        if not ok:
            out.append((fld, msg))

    need(
        isinstance(c.batch_size, int) and c.batch_size >= 1,
        "batch_size",
        f"batch size {c.batch_size} is not a positive whole number: use e.g. 64",
    )
    need(
        isinstance(c.epochs, int) and c.epochs >= 1,
        "epochs",
        f"epochs {c.epochs} must be 1 or more",
    )
    need(
        isinstance(c.max_steps, int) and c.max_steps >= 0,
        "max_steps",
        f"max_steps {c.max_steps} must be 0 (no limit) or more",
    )
    need(
        isinstance(c.lr, (int, float)) and c.lr > 0,
        "lr",
        f"learning rate {c.lr} must be above 0: use e.g. 0.05",
    )
    need(
        isinstance(c.workers, int) and c.workers >= 0,
        "workers",
        f"workers {c.workers} must be 0 or more",
    )
    need(isinstance(c.seed, int) and c.seed >= 0, "seed", f"seed {c.seed} must be 0 or more")
    need(
        isinstance(c.log_every, int) and c.log_every >= 1,
        "log_every",
        f"log_every {c.log_every} must be 1 or more",
    )
    need(
        isinstance(c.val_every, int) and c.val_every >= 0,
        "val_every",
        f"val_every {c.val_every} must be 0 (each epoch end) or more",
    )
    need(
        isinstance(c.image_size, int) and 4 <= c.image_size <= 1024,
        "image_size",
        f"image size {c.image_size} is outside 4..1024: use e.g. 32",
    )
    need(
        isinstance(c.grad_norm_warn, (int, float)) and c.grad_norm_warn >= 0,
        "grad_norm_warn",
        f"grad_norm_warn {c.grad_norm_warn} must be 0 (off) or more",
    )
    need(
        c.checkpoint in CHECKPOINTS,
        "checkpoint",
        f"checkpoint {c.checkpoint!r} is unknown: use last or none",
    )
    window = profile_problem(c.profile_steps, c.max_steps, last_step(c))
    need(window is None, "profile_steps", f"profile steps {c.profile_steps!r}: {window}")
    return out + health_problems(c)


def health_problems(c: Any) -> list[tuple[str, str]]:
    """The options of a run that goes wrong: stall threshold, restarts, resume."""
    out: list[tuple[str, str]] = []
    ok = (
        isinstance(c.stall_after, (int, float))
        and not isinstance(c.stall_after, bool)
        and 0 <= c.stall_after < 1e7
    )
    if not ok:
        out.append(
            (
                "stall_after",
                f"stall_after {c.stall_after} must be 0 (automatic: the larger of 60 s and 20 "
                "median steps) or a number of seconds, e.g. 300",
            )
        )
    if (
        not isinstance(c.max_restarts, int)
        or isinstance(c.max_restarts, bool)
        or not 0 <= c.max_restarts <= 100
    ):
        out.append(
            ("max_restarts", f"max_restarts {c.max_restarts} must be a whole number from 0 to 100")
        )
    elif c.max_restarts and not modes.torchrun(c.mode):
        out.append(
            (
                "max_restarts",
                f"restarts are torchrun's, and {c.mode} does not run under torchrun: "
                "use mode ddp, or max_restarts 0",
            )
        )
    if not isinstance(c.resume, str):
        out.append(("resume", "resume must be the path of a checkpoint file"))
    elif c.resume.strip() and not is_checkpoint(Path(c.resume.strip()).expanduser()):
        out.append(
            (
                "resume",
                f"no checkpoint at {c.resume.strip()!r}: give a last.pt the trainer wrote (a "
                "run's checkpoints/last.pt) or an fsdp run's whole checkpoints/last.dcp folder, "
                "or leave it empty to start fresh",
            )
        )
    return out


def last_step(c: Any) -> int | None:
    """The run's last optimizer step when it can be told before it starts: ``max_steps``, or fewer
    when the epochs of a data set of known size end first (``--drop-last``: whole batches); None
    for a folder of images."""
    from lab.engine.preflight.disk import TRAIN_IMAGES

    images = TRAIN_IMAGES.get(c.dataset) if isinstance(c.dataset, str) else None
    max_steps = c.max_steps if isinstance(c.max_steps, int) and c.max_steps > 0 else None
    ok = isinstance(c.epochs, int) and isinstance(c.batch_size, int) and c.batch_size > 0
    if images is None or not ok or c.epochs < 1:
        return max_steps
    planned = c.epochs * (images // c.batch_size)
    return planned if max_steps is None else min(planned, max_steps)


def profile_problem(text: object, max_steps: object, last: int | None = None) -> str | None:
    """What is wrong with a ``--profile-steps`` window, as far as it can be told without reading
    the data set (``last``: the run's last step, ``last_step``, where the data set's size is
    known)."""
    m = re.fullmatch(r"(\d+):(\d+)", text) if isinstance(text, str) else None
    if text == "" or not m:
        return (
            None
            if text == ""
            else "not A:B in whole steps: e.g. 20:25 profiles steps 20 to 24; leave it empty for "
            "none"
        )
    a, b = int(m.group(1)), int(m.group(2))
    if a < 1:
        return f"steps count from 1: start at 1 or later, e.g. 1:{max(b, 2)}"
    if b <= a:
        return f"B must be greater than A (the window is steps A to B-1), e.g. {a}:{a + 5}"
    if isinstance(max_steps, int) and 0 < max_steps < b - 1 and (last is None or last == max_steps):
        return (
            f"the run stops after max_steps {max_steps}: "
            f"end the window by {max_steps + 1} or raise max_steps"
        )
    if last is not None and last < b - 1:
        return (
            f"the run ends after step {last} (its epochs of whole batches): "
            f"end the window by {last + 1}, or raise epochs (or max_steps)"
        )
    return None
