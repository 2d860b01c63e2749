"""Sharded checkpoints of ``--mode fsdp``: ``checkpoints/last.dcp/``, torch.distributed.checkpoint.

Every rank writes its own shards of the model and of the optimizer state with ``dcp.save``:
nothing is gathered for them, and a resume reads only what each rank holds. The state is
``get_state_dict``'s (``torch.distributed.checkpoint.state_dict``): FSDP2's DTensors keyed by
parameter name as a single run's model is, under ``model`` and ``optimizer``. The folder::

    last.dcp/
      .metadata          DCP's index of every tensor's shards (rank 0, once all ranks wrote)
      __<rank>_0.distcp  each rank's shards
      trainer.json       rank 0, written last: step, epoch, batch_in_epoch, scaler, config,
                         world_size (the ranks that wrote the shards)

A save goes into ``.last.dcp.tmp/``; ``dcp.save`` returns on every rank once all shards and
``.metadata`` are written, then rank 0 writes trainer.json into it and renames it ``last.dcp``
(the previous one moved aside to ``.last.dcp.old`` for the moment between the two renames). A
folder without ``.metadata`` or trainer.json is never picked (``complete``), so a run killed
mid-save resumes from the checkpoint before. ``load_weights`` reads into whatever model this run
holds: DCP reshards onto any rank count under fsdp and hands a single, dp or ddp run whole
tensors, so a sharded checkpoint resumes in every mode (tests/test_train_fsdp.py). All ranks must
see the run folder (one filesystem), as torchrun's ranks on one machine do.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from training.cli import BadInput
from training.diskfull import DiskFull, is_full, writing
from training.metrics import write_json_atomic

log = logging.getLogger(__name__)
DIR = "last.dcp"
TMP = ".last.dcp.tmp"  # a save in progress: never picked
OLD = ".last.dcp.old"  # the previous checkpoint, between moving it aside and the new one's rename
META = "trainer.json"
INDEX = ".metadata"  # DCP's own, written by its coordinator (rank 0) after every rank's shards


def complete(folder: Path) -> bool:
    """Is ``folder`` a whole sharded checkpoint: DCP's index and the trainer's record in it?"""
    return (folder / INDEX).is_file() and (folder / META).is_file()


def latest(checkpoints: Path) -> Path | None:
    """The sharded checkpoint in ``checkpoints/`` a resume continues from: ``last.dcp``, else the
    previous one a run killed between its two renames left as ``.last.dcp.old``; ``None``."""
    for name in (DIR, OLD):
        if complete(checkpoints / name):
            return checkpoints / name
    return None


def written_at(folder: Path) -> float:
    """When the save of a complete checkpoint ended: its trainer.json, written last."""
    return (folder / META).stat().st_mtime


def save(
    checkpoints: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    meta: dict[str, Any],
    is_main: bool,
) -> None:
    """Write ``checkpoints/last.dcp`` (a collective: every rank calls it, each writing its own
    shards); ``meta`` is what the trainer needs to go on (step, epoch, ...), rank 0's."""
    dcp, CheckpointException, get_state_dict, _set = _dcp()
    tmp, last, old = checkpoints / TMP, checkpoints / DIR, checkpoints / OLD
    with writing(checkpoints):
        if is_main:
            shutil.rmtree(tmp, ignore_errors=True)  # what a save killed half-way left
            tmp.mkdir(parents=True)
        if dist.is_initialized():
            dist.barrier()  # no rank writes into the temp folder before rank 0 has emptied it
        model_state, optim_state = get_state_dict(model, optimizer)
        try:
            dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=tmp)
        except CheckpointException as e:  # every rank gets every rank's failures
            raise _full(e, checkpoints) from None
        if not is_main:
            return
        world = dist.get_world_size() if dist.is_initialized() else 1
        write_json_atomic(tmp / META, {**meta, "world_size": world})
        if last.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(last, old)
        os.replace(tmp, last)
        shutil.rmtree(old, ignore_errors=True)


def _dcp() -> tuple[Any, type[Exception], Any, Any]:
    """torch.distributed.checkpoint, its exception, get_state_dict and set_state_dict, imported
    by the saves and loads themselves: most trainer processes never write a sharded checkpoint,
    and each paid for the import at start (with torchvision's for tinycnn, which ``models.check``
    now skips, about 0.4 s of CPU per process here, 3.99 against 3.57 s in three pairs)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    return dcp, CheckpointException, get_state_dict, set_state_dict


def _full(e: Any, folder: Path) -> BaseException:
    """A rank's full disk inside DCP's wrapper as ``DiskFull`` (the trainer's one line, exit 4)."""
    for error, _trace in e.failures.values():
        if is_full(error):
            return DiskFull(folder, error)
    return e


def read_meta(folder: Path) -> dict[str, Any]:
    """The trainer's record of a sharded checkpoint, with ``sharded`` naming the folder (read
    before the process group starts); ``BadInput`` when it is not a whole one of ours."""
    if not complete(folder):
        raise BadInput(
            f"--resume {folder}: not a complete sharded checkpoint (no {INDEX} or {META}: its "
            "save was cut short); give the run's checkpoints/last.dcp or last.pt, or 'auto'"
        )
    try:
        meta = json.loads((folder / META).read_text())
        int(meta["step"]), int(meta["epoch"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BadInput(f"--resume {folder}: cannot read its {META} ({type(e).__name__})") from None
    return {**meta, "sharded": str(folder)}


def load_weights(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Read a sharded checkpoint into ``model`` and ``optimizer`` as this run holds them (FSDP's
    shards on any rank count, or whole tensors); a misfit raises the first rank's error."""
    dcp, CheckpointException, get_state_dict, set_state_dict = _dcp()
    # the target's own state (a fresh optimizer's made by a zero step) says what to read where
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optim_state}
    try:
        with warnings.catch_warnings():  # a single or dp run reads in one process: the intent
            warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
            dcp.load(state, checkpoint_id=folder, no_dist=not dist.is_initialized())
    except CheckpointException as e:  # unwrapped, so the caller words it as any misfit
        first = next(iter(e.failures.values()), (None, None))[0]
        if isinstance(first, (RuntimeError, ValueError, KeyError)):
            raise first from None
        raise
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
    )
