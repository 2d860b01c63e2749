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
inside its DataParallel/DDP wrapper when that is the only difference. An fsdp run also writes
its sharded checkpoint, ``checkpoints/last.dcp/`` (``training.sharded_checkpoint``), after
``last.pt``; ``resolve`` picks the newer of the two for ``--resume auto``, ``load`` and
``restore`` read either in any mode. Tested by tests/test_train_run.py (resume, a file that is not
a checkpoint), tests/test_train_cli.py (a missing file), tests/test_diagnose_seeds.py (a wrapped
model's checkpoint) and tests/test_train_fsdp.py (the sharded one, a save cut short).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO, Iterable

import torch
from torch import nn

from training import sharded_checkpoint, sharding
from training.cli import BadInput
from training.diskfull import writing

LAST = "last.pt"
WRAPPER_PREFIX = "module."  # what DataParallel and DDP put before every key of the model they wrap


def resolve(resume: str | None, log_dir: Path, restarted: bool = False) -> Path | None:
    """The checkpoint ``--resume`` names: a file, a sharded folder or ``None`` for a fresh start.

    ``auto`` means the newest complete checkpoint in ``LOG_DIR/checkpoints/`` (``newest``: an
    fsdp run's ``last.dcp`` or ``last.pt``; a fresh start when there is none); any other value
    must be an existing file or a complete sharded folder. A ``restarted`` attempt (torchrun's
    ``--max-restarts``) continues from its own newest when it wrote one, whatever ``--resume``
    names: the one it was started from is older.
    """
    own = newest(log_dir / "checkpoints")
    if not resume:
        return None
    if resume == "auto" or (restarted and own is not None):
        return own
    path = Path(resume).expanduser()
    if path.is_file() or path.is_dir():  # a folder is checked whole by ``load``
        return path
    beside = sharded_checkpoint.latest(path.parent)
    hint = f" (a sharded one is beside it: --resume {beside})" if beside else ""
    raise BadInput(
        f"--resume {resume}: no such checkpoint file; give a .pt file, a .dcp folder or "
        f"'auto'{hint}"
    )


def newest(checkpoints: Path) -> Path | None:
    """The checkpoint ``--resume auto`` picks in ``checkpoints/``: of ``last.pt`` and the whole
    sharded one (``sharded_checkpoint.latest``: never a save cut short), the one written last.
    An fsdp run writes ``last.pt`` first, so its ``last.dcp`` of the same step is the newer."""
    found = [checkpoints / LAST] if (checkpoints / LAST).is_file() else []
    sharded = sharded_checkpoint.latest(checkpoints)
    return max(found + ([sharded] if sharded else []), key=_written_at, default=None)


def _written_at(path: Path) -> float:
    return sharded_checkpoint.written_at(path) if path.is_dir() else path.stat().st_mtime


def load(path: Path) -> dict[str, Any]:
    """Read a checkpoint onto the CPU; ``BadInput`` when it is not one of ours. A sharded folder
    gives only its trainer.json (``sharded`` names it): ``restore`` reads the shards."""
    if path.is_dir():
        return sharded_checkpoint.read_meta(path)
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


def origin(state: dict[str, Any] | None, mode: str, world_size: int) -> str:
    """How a sharded checkpoint met this run's ranks, for the resume line ('' for a file)."""
    if not state or "sharded" not in state:
        return ""
    saved = int(state.get("world_size") or 0)
    if mode != "fsdp":
        return f"; the shards of {saved} fsdp ranks read whole into this {mode} run"
    if saved != world_size:
        return (
            f"; the shards of {saved} ranks resharded onto {world_size} by "
            "torch.distributed.checkpoint (a rank count change is supported)"
        )
    return f"; each of the {saved} ranks read its own shards"


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


def write(
    checkpoints: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    meta: dict[str, Any],
    fsdp: bool,
    is_main: bool,
) -> None:
    """The trainer's checkpoint of this step (every rank calls it): rank 0 writes ``last.pt``,
    the model and optimizer (``weights``) with ``meta`` (scaler, step, epoch, batch_in_epoch,
    config); under fsdp every rank then writes its shards into ``last.dcp``.

    fsdp keeps writing the gathered ``last.pt`` too, at the cost of a gather: it is the file the
    lab's Resume and the other modes' runs read (``lab.runfolder.LAST_CHECKPOINT``); ``last.dcp``,
    written after it and so the newer, is what ``--resume auto`` and a restart pick."""
    state = weights(model, optimizer, fsdp)
    if is_main:
        save(checkpoints / LAST, {**state, **meta})
    del state  # rank 0's gathered copy goes before the shards are staged
    if fsdp:
        sharded_checkpoint.save(checkpoints, model, optimizer, meta, is_main)


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
    (``training.sharding.load_full_state``), so a checkpoint moves between the modes; a sharded
    one (``sharded``: its folder) is read shard by shard (``sharded_checkpoint.load_weights``)."""
    try:
        if "sharded" in state:
            sharded_checkpoint.load_weights(Path(state["sharded"]), model, optimizer)
        elif fsdp or state.get("optimizer_keys") == "names":
            optim = state["optimizer"]
            if state.get("optimizer_keys") != "names":  # a single, dp or ddp run's, into shards
                optim = keyed_by_name(optim, model)
            sharding.load_full_state(model, optimizer, state["model"], optim)
        else:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as e:
        saved = state["model"] if isinstance(state.get("model"), dict) else {}
        raise BadInput(misfit(e, model.state_dict(), saved, name)) from None


def keyed_by_name(optim_state: dict[str, Any], model: nn.Module) -> dict[str, Any]:
    """An optimizer state keyed by position (``torch.optim.Optimizer.state_dict``: the i-th
    parameter the optimizer was given) keyed by parameter name instead, the form FSDP's
    ``set_optimizer_state_dict`` reads whole. Every mode builds its optimizer from the model's
    parameters in ``named_parameters`` order (the DP and DDP wrappers add none), so position i is
    the i-th name; a count that differs raises ``KeyError`` for ``misfit`` to word."""
    names = [n for n, _ in model.named_parameters()]
    count = sum(len(g["params"]) for g in optim_state["param_groups"])
    if count != len(names):
        raise KeyError(f"the optimizer holds {count} parameters, the model {len(names)}")
    return {
        "state": {names[int(i)]: v for i, v in optim_state["state"].items()},
        "param_groups": [
            {**g, "params": [names[int(i)] for i in g["params"]]}
            for g in optim_state["param_groups"]
        ],
    }


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
