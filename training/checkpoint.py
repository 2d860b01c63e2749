"""Checkpoints: finding, reading and atomically writing ``checkpoints/last.pt``.

Owns the checkpoint file format: a dict with ``model`` (the unwrapped model's
state dict, so DP/DDP/single checkpoints are interchangeable; FSDP's shards gathered whole into
the same keys), ``optimizer`` (keyed by parameter name, ``optimizer_keys`` "names", when FSDP
wrote it: ``weights``/``restore`` move it between the modes),
``scaler``, ``step``, ``epoch``, ``batch_in_epoch`` (optimizer steps already
taken inside ``epoch``) and ``config``. Files are written to a temp name and renamed so a crash or
a full disk never leaves half a checkpoint (tests/test_disk_full.py). Reading happens before the
first step, and any problem is a ``BadInput``; ``misfit`` words a state dict
that does not fit the model, naming the ``module.`` prefix of a model saved
inside its DataParallel/DDP wrapper when that is the only difference. Tested
by tests/test_train_run.py (resume, a file that is not a checkpoint),
tests/test_train_cli.py (a missing file) and tests/test_diagnose_seeds.py
(a wrapped model's checkpoint).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO, Iterable

import torch
from torch import nn

from training import sharding
from training.cli import BadInput
from training.diskfull import writing

LAST = "last.pt"
WRAPPER_PREFIX = "module."  # what DataParallel and DDP put before every key of the model they wrap


def resolve(resume: str | None, log_dir: Path, restarted: bool = False) -> Path | None:
    """The checkpoint file ``--resume`` names; ``None`` for a fresh start.

    ``auto`` means ``LOG_DIR/checkpoints/last.pt`` when it exists (a fresh
    start otherwise); any other value must be an existing file. A
    ``restarted`` attempt (torchrun's ``--max-restarts``) continues from its
    own ``last.pt`` when it wrote one, whatever ``--resume`` names: the file
    it was started from is older.
    """
    own = log_dir / "checkpoints" / LAST
    if not resume:
        return None
    if resume == "auto" or (restarted and own.is_file()):
        return own if own.is_file() else None
    path = Path(resume).expanduser()
    if not path.is_file():
        raise BadInput(f"--resume {resume}: no such checkpoint file; give a .pt file or 'auto'")
    return path


def load(path: Path) -> dict[str, Any]:
    """Read a checkpoint onto the CPU; ``BadInput`` when it is not one of ours."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # pickle, zip and torch errors all mean "not a usable checkpoint"
        raise BadInput(
            f"--resume {path}: cannot read it as a checkpoint ({type(e).__name__}); give a "
            "last.pt this trainer wrote"
        ) from None
    missing = {"model", "optimizer", "step", "epoch"} - set(
        state if isinstance(state, dict) else ()
    )
    if missing:
        raise BadInput(
            f"--resume {path}: not a trainer checkpoint (missing {', '.join(sorted(missing))})"
        )
    return state


class _Sink:
    """The file ``torch.save`` writes through: torch turns a failed write into a ``RuntimeError``
    ("unexpected pos ..."), so the ``OSError`` itself (a full disk's ENOSPC) is kept here."""

    def __init__(self, f: BinaryIO) -> None:
        self.f, self.error = f, None

    def write(self, data: bytes) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


def save(path: Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically: into a temp file, then renamed over ``path``, so
    the last complete checkpoint stays when a write fails (a full disk: ``DiskFull``)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with writing(path.parent):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                sink = _Sink(f)
                try:
                    torch.save(state, sink)
                except RuntimeError:
                    if sink.error is not None:
                        raise sink.error from None
                    raise
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def weights(model: nn.Module, optimizer: torch.optim.Optimizer, fsdp: bool) -> dict[str, Any]:
    """A checkpoint's ``model`` and ``optimizer`` (every rank calls it: under FSDP the shards are
    gathered, a collective). FSDP's optimizer state is keyed by parameter name
    (``optimizer_keys`` "names", ``training.sharding.full_state``); the others' by position."""
    if fsdp:
        model_state, optim_state = sharding.full_state(model, optimizer)
        return {"model": model_state, "optimizer": optim_state, "optimizer_keys": "names"}
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}


def restore(
    model: nn.Module, optimizer: torch.optim.Optimizer, state: dict, name: str, fsdp: bool
) -> None:
    """Put a checkpoint's ``model`` and ``optimizer`` back (``BadInput`` naming the misfit). A
    state keyed by name, or any state into FSDP's shards, goes through the same helpers
    (``training.sharding.load_full_state``), so a checkpoint moves between the modes."""
    try:
        if fsdp or state.get("optimizer_keys") == "names":
            sharding.load_full_state(model, optimizer, state["model"], state["optimizer"])
        else:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as e:
        saved = state["model"] if isinstance(state.get("model"), dict) else {}
        raise BadInput(misfit(e, model.state_dict(), saved, name)) from None


def _unprefixed(keys: Iterable[str]) -> set[str]:
    return {k[len(WRAPPER_PREFIX) :] if k.startswith(WRAPPER_PREFIX) else k for k in keys}


def prefix_only(expected: Iterable[str], saved: Iterable[str]) -> bool:
    """Do ``saved`` keys differ from ``expected`` ones only by the wrapper's ``module.`` prefix?"""
    exp, got = set(expected), set(saved)
    return exp != got and _unprefixed(exp) == _unprefixed(got)


def misfit(error: Exception, expected: Iterable[str], saved: Iterable[str], model: str) -> str:
    """The one-line refusal of a checkpoint whose model state does not load into ``model``."""
    saved = list(saved)
    if prefix_only(expected, saved):
        has = any(k.startswith(WRAPPER_PREFIX) for k in saved)
        where = (
            "carry a 'module.' prefix: it was saved from the DataParallel/DDP wrapper, not the "
            "model inside"
            if has
            else "lack the 'module.' prefix this model's have"
        )
        return (
            f"--resume: the checkpoint's model keys {where}, so they differ from --model "
            f"{model}'s only by the "
            "'module.' prefix: save model.module.state_dict() instead of model.state_dict(), or "
            "strip the prefix "
            "({k.removeprefix('module.'): v for k, v in state['model'].items()}) and save the "
            "checkpoint again"
        )
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return f"--resume: checkpoint does not fit --model {model} on this data ({first})"
