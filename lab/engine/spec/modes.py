"""How a run is parallelised, as the facts the rest of the lab asks instead of naming the mode.

``single``: one process, one device. ``dp``: one process driving every GPU it is given through
``nn.DataParallel`` (one device without GPUs). ``ddp`` and ``fsdp``: one process per device under
``torchrun``, one process group; ``ddp`` keeps a whole replica of the model, its gradients and its
optimizer state on every rank and all-reduces the gradients, ``fsdp`` (FSDP2's ``fully_shard``)
shards all three over the ranks, all-gathers each block's parameters before it runs and
reduce-scatters its gradients: memory per device traded for communication.

``torchrun(mode)`` is the one question most code asks (how many processes, the launcher, the
rendezvous, per-rank batch); ``sharded(mode)`` the memory estimate's and Anatomy's.
"""

from __future__ import annotations

SINGLE, DP, DDP, FSDP = "single", "dp", "ddp", "fsdp"
MODES = (SINGLE, DP, DDP, FSDP)
TORCHRUN = (DDP, FSDP)  # one process per device under torchrun
SHARDED = (FSDP,)  # parameters, gradients and optimizer state split over the ranks
SCRIPT_MODES = (SINGLE, DP, DDP)  # a user's script that shards itself runs in ddp placement
SWEEP_DEFAULT = (SINGLE, DP, DDP)  # fsdp is asked for: it answers a memory question
LABELS = {
    SINGLE: "single device",
    DP: "DataParallel",
    DDP: "DistributedDataParallel",
    FSDP: "FSDP (sharded)",
}


def torchrun(mode: str | None) -> bool:
    """Whether the mode starts one process per device under torchrun."""
    return mode in TORCHRUN


def sharded(mode: str | None) -> bool:
    """Whether the mode splits the model's state over its ranks."""
    return mode in SHARDED
