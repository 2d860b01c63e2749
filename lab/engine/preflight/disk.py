"""Will a run's checkpoints and events fit in the runs folder? The pre-flight's disk warning.

A rough estimate, on the safe side (``need``):

- checkpoints: parameters x 4 bytes x 3 (the float32 weights, the optimizer's momentum, and as
  much again for the rest of its state and the file) per checkpoint; the trainer keeps one
  (``checkpoints/last.pt``) but writes the next one beside it before the rename, so two at the
  peak; an fsdp run also writes its sharded copy (``checkpoints/last.dcp``, the same bytes over
  its ranks) and the next one beside it, so four; none with ``--checkpoint none``.
- events: ``EVENT_BYTES_PER_LOG`` per logged step (about 20 scalars of some 45 bytes each and
  the memory tags of a few devices; the tinycnn on the CPU writes about 540), times the steps:
  ``max_steps``, else epochs x the training images / batch (digits 1,437, synthetic 2,048, an
  image folder taken as ``FOLDER_IMAGES``, a guess: its files are not counted here).

The parameters come from ``lab.engine.preflight.estimate`` (the model built on the meta device,
which imports torch). A run on the CPU has its parameters counted only when the runs folder has
less than ``ALWAYS_ROOM_BYTES`` free: more than any torchvision model's two checkpoints (vit_h_14,
632 M parameters: about 15 GB), so a CPU run on a roomy disk imports no torch. The free space is
read by ``free`` (``lab.engine.supervise.diskfull.free_bytes`` unless a test passes its own).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from lab.engine.preflight import estimate
from lab.engine.spec.modes import sharded
from lab.engine.supervise.diskfull import free_bytes, size_text
from lab.runfolder import runs_dir

if TYPE_CHECKING:
    from lab.engine.spec.run import RunConfig

log = logging.getLogger(__name__)
CHECKPOINT_COPIES = 3  # weights + momentum + the rest of the optimizer's state and the file
CHECKPOINTS_AT_PEAK = 2  # last.pt and the next one, written beside it before the rename
FSDP_CHECKPOINTS_AT_PEAK = 4  # and last.dcp with the next one (training.sharded_checkpoint)
EVENT_BYTES_PER_LOG = 1024
TRAIN_IMAGES = {"digits": 1437, "synthetic": 2048}
FOLDER_IMAGES = 100_000
ALWAYS_ROOM_BYTES = 50 * 1024**3


def steps(config: RunConfig) -> int:
    """The optimizer steps the run will take, roughly."""
    if config.max_steps and config.max_steps > 0:
        return int(config.max_steps)
    images = TRAIN_IMAGES.get(config.dataset, FOLDER_IMAGES)
    return max(1, config.epochs) * math.ceil(images / max(1, config.batch_size))


def need(config: RunConfig) -> tuple[int, str]:
    """Bytes the run may write into its folder at the peak, and of what in words."""
    events = EVENT_BYTES_PER_LOG * math.ceil(steps(config) / max(1, config.log_every))
    if config.checkpoint == "none":
        return events, f"events {size_text(events)}"
    # batch 2: BatchNorm refuses one image; the parameters do not depend on it
    params_mib = estimate.estimate(config.model, 2, config.image_size).params_mib
    one = int(params_mib * 1024 * 1024 * CHECKPOINT_COPIES)
    copies = FSDP_CHECKPOINTS_AT_PEAK if sharded(config.mode) else CHECKPOINTS_AT_PEAK
    return one * copies + events, (
        f"{copies} checkpoints of about {size_text(one)} + events {size_text(events)}"
    )


def facts(config: RunConfig, free: Callable[[Path], int | None] | None = None) -> dict:
    """``MachineFacts``' disk fields: the runs folder, its free bytes, the run's need and its
    words (need left out when the folder has room for anything, or cannot be estimated)."""
    folder = runs_dir()
    left = (free or free_bytes)(folder)
    out: dict = {"disk_folder": str(folder), "disk_free": left}
    if left is None or (not config.gpus and left >= ALWAYS_ROOM_BYTES):
        return out
    try:
        out["disk_need"], out["disk_text"] = need(config)
    except (ValueError, RuntimeError, TypeError) as e:  # a config the validation refuses anyway
        log.info("no disk estimate for this config: %s", e)
    return out


def warning(free: int | None, need_bytes: int | None, text: str, folder: str) -> str | None:
    """The pre-flight's warning when the runs folder has less free space than the run needs."""
    if free is None or need_bytes is None or free >= need_bytes:
        return None
    return (
        f"Warning: the runs folder {folder} has {size_text(free)} free, less than the about "
        f"{size_text(need_bytes)} this run may write there ({text}): when the disk fills the "
        "run ends failed (disk_full); free space there or point LAB_RUNS_DIR at a disk with room."
    )
