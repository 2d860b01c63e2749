"""Where the run executes: devices, the process group, and small collective helpers.

Owns choosing the devices for ``single``, ``dp``, ``ddp`` and ``fsdp`` (and refusing
devices that are not visible or lack free memory), wrapping the model for the
mode, starting and ending the process group, and the torchvision-references-style helpers
(``init_distributed_mode``, ``reduce_across_processes``, ``any_across_processes``,
``gather_objects``, ``barrier_then_destroy``); whether this process is the one
that logs and writes is ``Placement.is_main``, known before the process group
starts. Device names are unique over a whole job: ``node<n>:cuda<i>`` when
several nodes each have their own ``cuda0``. The
order of DDP set-up matters: ``torch.cuda.set_device(local_rank)`` comes
before ``init_process_group`` so NCCL binds each rank to its own GPU; gloo is
used on CPU. A restarted torchrun attempt joins through a store prefix of its
own (``restart_store``).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from training import sharding
from training.cli import DISTRIBUTED, BadInput, split_batch
from training.knobs import AutocastForward

log = logging.getLogger(__name__)
MIN_FREE_MIB = 256  # below this a CUDA context plus a small model will not fit


@dataclass
class Placement:
    """The devices a run uses, as decided before the first step."""

    mode: str
    effective_mode: str
    device: torch.device
    device_ids: list[int] = field(default_factory=list)  # DataParallel replicas
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    backend: str | None = None
    per_device_batch: int = 0
    effective_mode_reason: str | None = None
    node_rank: int = 0  # torchrun's GROUP_RANK
    nnodes: int = 1  # torchrun's GROUP_WORLD_SIZE

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that logs progress and writes the run folder's files."""
        return self.rank == 0

    @property
    def device_names(self) -> list[str]:
        """This process's device names as the contract spells them: cuda<i> (node<n>:cuda<i> over
        several nodes, whose local indices repeat), cpu<rank> (the global rank: unique already)."""
        if self.device.type == "cuda":
            node = f"node{self.node_rank}:" if self.nnodes > 1 else ""
            return [f"{node}cuda{i}" for i in (self.device_ids or [self.device.index or 0])]
        return [f"cpu{self.rank}"]


def _want_cuda(pref: str) -> bool:
    if pref == "cpu":
        return False
    available = torch.cuda.is_available()
    if pref == "cuda" and not available:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        raise BadInput(
            f"--device cuda but no CUDA device is visible{where}: use --device cpu or auto"
        )
    return available


def place(mode: str, device_pref: str, global_batch: int) -> Placement:
    """Decide devices and per-device batch for ``mode``; ``BadInput`` when impossible.

    Does not start the process group (see ``init_distributed_mode``).
    """
    cuda = _want_cuda(device_pref)
    if mode in DISTRIBUTED:  # a process per device under torchrun: DDP, or FSDP's shards
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        node_rank, nnodes = _node(rank, world)
        per_rank = split_batch(global_batch, world, "GPUs" if cuda else "ranks")
        if cuda:
            count = torch.cuda.device_count()
            if local_rank >= count:
                raise BadInput(
                    f"local rank {local_rank} needs cuda:{local_rank} but only {count} CUDA "
                    "device(s) are visible: "
                    f"use --nproc-per-node {count} or fewer"
                )
            device, backend = torch.device("cuda", local_rank), "nccl"
        else:
            device, backend = torch.device("cpu"), "gloo"
        return Placement(
            mode,
            mode,
            device,
            rank=rank,
            local_rank=local_rank,
            world_size=world,
            backend=backend,
            per_device_batch=per_rank,
            node_rank=node_rank,
            nnodes=nnodes,
        )
    if mode == "dp":
        count = torch.cuda.device_count() if cuda else 0
        if count >= 2:
            per_gpu = split_batch(global_batch, count, "GPUs")
            return Placement(
                mode,
                "dp",
                torch.device("cuda", 0),
                device_ids=list(range(count)),
                per_device_batch=per_gpu,
            )
        reason = f"DataParallel needs at least two GPUs; {count} visible"
        device = torch.device("cuda", 0) if cuda else torch.device("cpu")
        return Placement(
            mode, "single", device, per_device_batch=global_batch, effective_mode_reason=reason
        )
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    return Placement(mode, "single", device, per_device_batch=global_batch)


def _node(rank: int, world: int) -> tuple[int, int]:
    """(this node's rank, the number of nodes): torchrun's GROUP_RANK and GROUP_WORLD_SIZE, else
    from LOCAL_WORLD_SIZE (a launcher of one's own that sets only the usual variables)."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE") or world)
    node = int(os.environ.get("GROUP_RANK") or rank // max(local, 1))
    return node, int(os.environ.get("GROUP_WORLD_SIZE") or max(1, world // max(local, 1)))


def wrap(
    model: nn.Module,
    placement: Placement,
    ddp_options: dict[str, Any] | None = None,
    amp_dtype: torch.dtype | None = None,
    fsdp_options: dict[str, Any] | None = None,
) -> nn.Module:
    """Move ``model`` to the run's device, then wrap it for the mode (DP, DDP, FSDP's shards, or
    not at all); ``ddp_options`` are DistributedDataParallel's keyword arguments and
    ``fsdp_options`` ``training.sharding.shard``'s (``training.knobs``). Under DP with
    ``amp_dtype`` the module DP replicates enters autocast itself
    (``training.knobs.AutocastForward``): DP's replica threads would not inherit its dtype; under
    FSDP it is the parameters' dtype in FSDP's own mixed precision."""
    model.to(placement.device)  # before any wrap: DP and DDP expect the module on its device
    if placement.effective_mode == "fsdp":
        return sharding.shard(
            model,
            placement.device,
            placement.world_size,
            param_dtype=amp_dtype,
            **(fsdp_options or {}),
        )
    if placement.effective_mode == "dp":
        kind = placement.device.type
        inner = model if amp_dtype is None else AutocastForward(model, kind, amp_dtype)
        return nn.DataParallel(inner, device_ids=placement.device_ids)
    if placement.effective_mode == "ddp":
        ids = [placement.local_rank] if placement.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids, **(ddp_options or {}))
    return model


def check_free_memory(placement: Placement, need_mib: float = MIN_FREE_MIB) -> None:
    """Refuse a CUDA device whose free memory (where readable) is below ``need_mib``."""
    if placement.device.type != "cuda":
        return
    for i in placement.device_ids or [placement.device.index or 0]:
        try:
            free, _total = torch.cuda.mem_get_info(i)
        except RuntimeError:
            continue  # not readable (e.g. some MIG set-ups): nothing to check
        if free / 2**20 < need_mib:
            raise BadInput(
                f"cuda{i} has {free / 2**20:.0f} MiB free, the run needs about {need_mib:.0f} MiB: "
                "stop what is using it or pick other GPUs with CUDA_VISIBLE_DEVICES"
            )


def init_distributed_mode(
    placement: Placement, timeout_s: float | None = None, cpu_collectives: bool = False
) -> None:
    """Bind the rank's GPU, then join the process group (DDP and FSDP only).

    ``timeout_s`` (``--dist-timeout``) is how long a collective may wait for
    the other ranks before it fails; None keeps PyTorch's default. ``cpu_collectives``: some
    collectives run on CPU tensors although the run is on GPUs (``--fsdp-cpu-offload``: the
    gradient norm's ``full_tensor()`` and the GradScaler's found-inf all-reduce over shards kept on
    the CPU), so the group has gloo for the CPU beside NCCL (``backend_of``).
    """
    if placement.effective_mode not in DISTRIBUTED:
        return
    if placement.device.type == "cuda":
        torch.cuda.set_device(placement.local_rank)  # before init_process_group: NCCL binds to it
    extra: dict[str, Any] = {"timeout": dt.timedelta(seconds=timeout_s)} if timeout_s else {}
    restart = restart_store(timeout_s)
    if restart is not None:
        extra["store"] = restart
    dist.init_process_group(
        backend=backend_of(placement, cpu_collectives),
        rank=placement.rank,
        world_size=placement.world_size,
        **extra,
    )


def backend_of(placement: Placement, cpu_collectives: bool = False) -> str:
    """``init_process_group``'s backend: the placement's (nccl on GPUs, gloo on the CPU), or
    ``cuda:nccl,cpu:gloo`` when GPU runs also reduce CPU tensors (torchtitan starts the same when
    it offloads to the CPU); a lone ``nccl`` group has no backend for them ("No backend type
    associated with device type cpu")."""
    if cpu_collectives and placement.device.type == "cuda":
        return f"cuda:{placement.backend},cpu:gloo"
    return placement.backend


def restart_store(timeout_s: float | None = None) -> Any:
    """A restarted torchrun attempt's store: the agent's, under a prefix of its own (None on a first
    attempt).

    torchrun (torch 2.14, gloo) gives every attempt the same store keys, so the ranks of a restart
    can read the dead attempt's addresses and hang or be refused connecting (seen here about one
    restart in two); a prefix per attempt keeps them apart."""
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0)
    if attempt <= 0 or not os.environ.get("MASTER_ADDR") or not os.environ.get("MASTER_PORT"):
        return None
    # torchrun's agent hosts the store (TORCHELASTIC_USE_AGENT_STORE); otherwise rank 0 does, as
    # env:// would
    host = (
        os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" and os.environ.get("RANK") == "0"
    )
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=host,
        timeout=dt.timedelta(seconds=timeout_s or 300),
    )
    return dist.PrefixStore(f"training/attempt_{attempt}", store)


def is_dist() -> bool:
    return dist.is_available() and dist.is_initialized()


def reduce_across_processes(t: torch.Tensor) -> torch.Tensor:
    """Sum ``t`` over all ranks in place (no-op outside DDP) and return it."""
    if is_dist():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def any_across_processes(flag: bool, device: torch.device) -> bool:
    """True on every rank when ``flag`` is true on any one (``flag`` itself outside DDP); a
    collective."""
    if not is_dist():
        return flag
    # NCCL wants it on the rank's GPU
    t = torch.tensor([int(flag)], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


class StopVote:
    """DDP's stop vote without a host-device sync: a MAX all-reduce of a CPU flag over a gloo
    group of its own, started asynchronously at one vote and read at the next (the answer lags one
    vote; every rank reads the same one at the same step). Outside DDP, the flag itself. Create
    it on every rank at the same point (``new_group`` is collective)."""

    def __init__(self) -> None:
        self.group = dist.new_group(backend="gloo") if is_dist() else None
        self._pending: tuple[Any, torch.Tensor] | None = None

    def __call__(self, flag: bool) -> bool:
        if not is_dist():
            return flag
        answer = False
        if self._pending is not None:
            work, t = self._pending
            work.wait()
            answer = bool(t.item())  # a CPU tensor: no device sync
        t = torch.tensor([int(flag)], dtype=torch.int32)
        work = dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group, async_op=True)
        self._pending = (work, t)
        return answer

    def close(self) -> None:
        """Wait for the last vote (every rank started it), so nothing is left in flight."""
        if self._pending is not None:
            self._pending[0].wait()
            self._pending = None


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj`` in rank order (``[obj]`` outside DDP)."""
    if not is_dist():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def barrier_then_destroy() -> None:
    """End the process group; the barrier first keeps gloo from aborting a rank at exit."""
    if is_dist():
        dist.barrier()
        dist.destroy_process_group()


def exit_process(code: int | None) -> None:
    """Exit with ``code`` without the interpreter's teardown, once the output is flushed.

    With gloo (torch 2.14), a rank sometimes aborts in the C++ teardown after
    ``destroy_process_group`` ("terminate called without an active
    exception", SIGABRT), and torchrun then fails the whole job although
    training finished: seen here even with the barrier first; a stopped rank
    (no barrier: a peer may be gone) leaves with its group still up. Everything
    of ours is written and closed by then, so the process leaves with ``os._exit``, which
    runs no destructors. Single runs leave the same way: tearing down torch's modules costs
    about 0.5 to 1 s of CPU per process here and does nothing for a run that has ended.
    Coverage, where it measures the process, saves its data first (``patch = ["_exit"]`` in
    pyproject.toml). ``None`` is 0, as for ``sys.exit``: torch's ``@record`` on the trainer's
    ``main`` returns it for ``--help``'s ``SystemExit(0)``.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)
