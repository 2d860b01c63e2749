"""How much GPU memory a run needs on each of its GPUs, measured for its model rather than assumed.

``estimate(model, batch, image_size, amp)`` is ``training.memory.forward_bytes``
(the trainer writes the same figures into summary.json's ``memory``): parameters + gradients + the
optimizer's state (the trainer's SGD with momentum keeps one buffer per
parameter) + one batch of activations: every tensor autograd saves for the
backward of one forward and loss at that batch, each storage counted once and
the parameters left out (``torch.autograd.graph.saved_tensors_hooks``). The
forward runs the trainer's own model (``training.models.build``) on PyTorch's
``meta`` device: the same operators, shapes and saved tensors as on the CPU
(tests/test_estimate.py checks they are equal), but nothing is allocated, so a
batch of 256 at 224 px costs no memory and a fraction of a second. With AMP
the forward is measured in float16 plus autocast's float16 copy of the
weights. Inputs are taken as 3 channels and 10 classes (RGB is the most our
datasets give; the head's size barely depends on the class count). Results
are cached per (model, batch, image size, amp). ``per_gpu(config)`` spreads
it over a run's GPUs the way each mode does, honouring every knob: it is
``training.memory.estimate_bytes``, the one estimate the trainer's summary.json
gives for the same config (precision, the accumulation's micro-batch, DDP's
buckets unless ``grad_as_bucket_view``, DP's extras on its first GPU, FSDP's shards and its
parameters all-gathered in flight, with no autocast copy, the whole gradients while it accumulates
and nothing but the gathered parameters and activations under ``--fsdp-cpu-offload``);
``torch_cuda_version`` is the
CUDA PyTorch was built for. torch is imported only inside these functions, so
the supervisor and the command line pay nothing for importing this module.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lab.engine.spec import modes
from lab.engine.spec.modes import DDP, DP, FSDP, SINGLE

if TYPE_CHECKING:
    from lab.engine.spec.run import RunConfig

_MIB = 1024 * 1024
CHANNELS, CLASSES = 3, 10
# training.memory.DP_EXTRA: the parts only DP's first GPU holds
DP_EXTRA = ("replica_gradients", "input_batch", "gathered_outputs", "loss")


@dataclass(frozen=True)
class Estimate:
    """MiB one GPU needs for a run, by part; the CUDA context and allocator slack come on top."""

    params_mib: float
    grads_mib: float
    optimizer_mib: float
    activations_mib: float
    buckets_mib: float = 0.0  # DDP's gradient buckets: one more gradient-sized copy
    batch: int = 0
    dp_extra_mib: float = 0.0  # DP's first GPU: the reduced gradients, the batch, the outputs
    gathered_mib: float = 0.0  # FSDP: the parameters all-gathered in flight

    @property
    def total_mib(self) -> float:
        return (
            self.params_mib
            + self.grads_mib
            + self.optimizer_mib
            + self.activations_mib
            + self.buckets_mib
            + self.dp_extra_mib
            + self.gathered_mib
        )

    def describe(self) -> str:
        """E.g. "parameters 43 MiB + gradients 43 MiB + momentum 43 MiB + activations of 64 images
        28 MiB"."""
        parts = [
            ("parameters", self.params_mib),
            ("gradients", self.grads_mib),
            ("momentum", self.optimizer_mib),
            (
                f"activations of {self.batch} image{'s' if self.batch != 1 else ''}",
                self.activations_mib,
            ),
            ("DDP buckets", self.buckets_mib),
            ("DP's extras on the first GPU", self.dp_extra_mib),
            ("FSDP's all-gathered parameters in flight", self.gathered_mib),
        ]
        return " + ".join(f"{name} {mib_text(v)}" for name, v in parts if v > 0)


def mib_text(mib: float) -> str:
    """``512 MiB``, ``1.4 GiB``."""
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib:.0f} MiB"


@functools.lru_cache(maxsize=64)
def estimate(model: str, batch: int, image_size: int, amp: bool = False) -> Estimate:
    """Parameters, gradients, momentum and a batch's activations of ``model`` (one device, no
    wrapper)."""
    from training import memory  # the one computation, shared with the trainer's summary.json

    b = memory.forward_bytes(model, CHANNELS, CLASSES, batch, image_size, amp)
    p = b["parameters"] / _MIB
    return Estimate(p, p, p, b["activations"] / _MIB, batch=batch)


def per_gpu(config: RunConfig) -> dict[int, Estimate]:
    """Physical GPU -> what the run needs there: ``training.memory.estimate_bytes``, the same
    estimate the trainer writes into summary.json, for this config (precision, the accumulation's
    micro-batch, DDP's buckets unless gradients are bucket views, DP's extras on its first GPU;
    under FSDP its shards, no autocast copy, the whole gradients while accumulating, and what
    ``--fsdp-cpu-offload`` moves to the CPU).
    """
    c = config
    gpus = list(c.gpus)
    if not gpus:
        return {}
    accum = c.micro_batches
    precision = c.precision if c.precision in ("fp16", "bf16") else "fp16" if c.amp else "fp32"
    if modes.torchrun(c.mode):
        mode, n, share = c.mode, len(gpus), c.batch_size // max(1, c.nproc * c.nnodes)
    elif c.mode == DP and len(gpus) > 1:
        mode, n, share = DP, len(gpus), c.batch_size // len(gpus)
    else:
        mode, n, share, gpus = SINGLE, 1, c.batch_size, gpus[:1]
    view = bool(c.grad_as_bucket_view) and mode == DDP
    shards = c.nproc * c.nnodes if mode == FSDP else 1
    reshard = c.reshard_after_forward != "off"
    offload = bool(c.fsdp_cpu_offload) and mode == FSDP
    each = _spread(
        mode,
        n,
        max(1, share),
        c.model,
        c.image_size,
        precision,
        accum,
        view,
        shards,
        reshard,
        offload,
    )
    return dict(zip(gpus, each))


@functools.lru_cache(maxsize=64)
def _spread(
    mode: str,
    n: int,
    share: int,
    model: str,
    image_size: int,
    precision: str,
    accum: int,
    view: bool,
    shards: int = 1,
    reshard: bool = True,
    offload: bool = False,
) -> tuple[Estimate, ...]:
    from training import memory  # the one estimate, shared with the trainer's summary.json

    micro = max(1, share // accum)  # what each forward takes
    parts = memory.estimate_bytes(
        mode,
        n,
        micro,
        model,
        CHANNELS,
        CLASSES,
        image_size,
        precision,
        view,
        shards,
        reshard,
        accum,
        offload,
    )
    return tuple(_of(p, micro) for p in parts)


def _of(parts: dict[str, int], batch: int) -> Estimate:
    extra = sum(parts.get(k, 0) for k in DP_EXTRA)
    return Estimate(
        parts["parameters"] / _MIB,
        parts["gradients"] / _MIB,
        parts["optimizer"] / _MIB,
        parts["activations"] / _MIB,
        parts.get("buckets", 0) / _MIB,
        batch,
        extra / _MIB,
        parts.get("gathered", 0) / _MIB,
    )


def torch_cuda_version() -> tuple[int, int] | None:
    """The CUDA version this PyTorch was built for, e.g. (12, 4); None for a CPU-only build."""
    import torch

    v = torch.version.cuda
    if not v:
        return None
    major, _, minor = v.partition(".")
    return int(major), int(minor.split(".")[0] or 0)
