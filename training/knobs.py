"""The performance options once the devices are known: precision, accumulation, DDP's options.

``precision(args, device)`` resolves ``--precision`` and ``--amp``: ``--amp`` alone is fp16 on
CUDA and bf16 on the CPU (its meaning before ``--precision`` existed), neither is fp32. fp16 runs
autocast with a GradScaler and needs CUDA; bf16 runs autocast without a scaler, on the CPU or on a
GPU that supports it. ``check`` refuses what the devices rule out (``BadInput``, one line): fp16
on the CPU, bf16 on a GPU of compute capability below 8.0 (``bf16_problem``: the run's own GPUs),
an ``--accum-steps`` that does not divide each process's batch (and, under DP, each micro-batch
over the GPUs). ``ddp_options`` is what
``DistributedDataParallel`` is given; ``micro_batches`` cuts a process's batch into
``--accum-steps`` equal parts, in order, so the optimizer step sees the same samples as without
accumulation, and ``forward_backward`` is the loop's forward and backward over them.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, ContextManager

import torch
from torch import nn

from training.cli import BadInput

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
BF16_MIN_CAPABILITY = (8, 0)  # Ampere: bfloat16 in hardware


def precision(args: Any, device: torch.device) -> str:
    """fp32, fp16 or bf16: ``--precision``, else ``--amp`` (fp16 on CUDA, bf16 on the CPU)."""
    if args.precision:
        return args.precision
    if args.amp:
        return "fp16" if device.type == "cuda" else "bf16"
    return "fp32"


def autocast(name: str, device: torch.device, mode: str = "single") -> ContextManager:
    """The forward pass's autocast for precision ``name`` (none for fp32, and none under FSDP,
    whose own policy casts: ``training.sharding``)."""
    if name not in DTYPES or mode == "fsdp":
        return nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[name])


def precision_policy(name: str, mode: str) -> str | None:
    """summary.json's ``precision_policy``: how half precision ``name`` was applied, "autocast"
    (norms, softmax and loss kept in fp32) or, under fsdp, "fsdp" (FSDP's MixedPrecisionPolicy
    casts the parameters and everything runs in half; ``autocast`` gives none there); None for
    fp32."""
    if name not in DTYPES:
        return None
    return "fsdp" if mode == "fsdp" else "autocast"


class AutocastForward(nn.Module):
    """``module``'s forward under ``torch.autocast(device_type, dtype)``, entered in the thread
    that runs it. The autocast state, its dtype included, is per thread: DataParallel's replica
    threads re-enter autocast with only ``enabled=`` (torch/nn/parallel/parallel_apply.py), i.e.
    CUDA's default float16, so an autocast around ``nn.DataParallel`` trains bf16 runs in fp16.
    Wrapping the module inside DP is PyTorch's documented AMP-with-DataParallel pattern
    (docs/notes/amp_examples, "DataParallel in a single process")."""

    def __init__(self, module: nn.Module, device_type: str, dtype: torch.dtype) -> None:
        super().__init__()
        self.module = module
        self.device_type, self.dtype = device_type, dtype

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(self.device_type, dtype=self.dtype):
            return self.module(*args, **kwargs)


def bf16_problem(device_ids: list[int]) -> str | None:
    """Why bf16 does not suit these CUDA devices (compute capability below 8.0, where it is
    emulated and slow), else None. Each run's own devices, by index: not
    ``torch.cuda.is_bf16_supported()``, which says yes on V100/T4 (emulation) and asks the current
    device, cuda:0 in every rank before ``set_device``."""
    for i in device_ids:
        major, minor = torch.cuda.get_device_capability(i)
        if (major, minor) < BF16_MIN_CAPABILITY:
            return (
                f"--precision bf16: GPU {i} ({torch.cuda.get_device_name(i)}) has compute "
                f"capability {major}.{minor}, below 8.0, where bfloat16 is emulated and slow: use "
                "--precision fp16"
            )
    return None


def check(args: Any, placement: Any) -> None:
    """Refuse the options the chosen devices rule out; ``BadInput`` with one line."""
    device = placement.device
    name = precision(args, device)
    if name == "fp16" and device.type != "cuda":
        raise BadInput(
            "--precision fp16 needs CUDA (autocast with a GradScaler); this run is on the CPU: "
            "use --precision bf16 there"
        )
    if getattr(args, "fsdp_cpu_offload", False) and device.type != "cuda":
        raise BadInput(
            "--fsdp-cpu-offload moves GPU memory to the CPU; this run is on the CPU already: "
            "leave out --fsdp-cpu-offload"
        )
    if getattr(args, "sync_bn", False) and device.type != "cuda":
        raise BadInput(
            "--sync-bn runs on GPUs only (nn.SyncBatchNorm wants CUDA inputs); this run is on the "
            "CPU: leave out --sync-bn"
        )
    if name == "bf16" and device.type == "cuda":
        ids = list(placement.device_ids) or [device.index or 0]
        problem = bf16_problem(ids)
        if problem:
            raise BadInput(problem)
    n = args.accum_steps
    per_process = args.batch_size // placement.world_size
    if per_process % n:
        fits = [d for d in range(1, min(per_process, 64) + 1) if per_process % d == 0]
        raise BadInput(
            f"--accum-steps {n} does not divide the batch of {per_process} per "
            f"{'rank' if placement.world_size > 1 else 'step'}: use one of "
            f"{', '.join(map(str, fits[-6:]))}"
        )
    gpus = len(placement.device_ids)
    if gpus > 1 and (per_process // n) % gpus:
        raise BadInput(
            f"--accum-steps {n}: a micro-batch of {per_process // n} does not split over {gpus} "
            "GPUs (DataParallel): lower --accum-steps or raise --batch-size"
        )


def ddp_options(args: Any) -> dict[str, Any]:
    """DistributedDataParallel's keyword arguments from the options given (only those given)."""
    out: dict[str, Any] = {}
    if args.bucket_cap_mb is not None:
        out["bucket_cap_mb"] = args.bucket_cap_mb
    for name in ("static_graph", "find_unused_parameters"):
        if getattr(args, name):
            out[name] = True
    if args.grad_as_bucket_view:
        out["gradient_as_bucket_view"] = True
    return out


def fsdp_options(args: Any) -> dict[str, Any]:
    """``training.sharding.shard``'s options from the flags: resharding after the forward unless
    ``--reshard-after-forward off``, ``--fsdp-cpu-offload``."""
    return {
        "reshard_after_forward": getattr(args, "reshard_after_forward", None) != "off",
        "cpu_offload": bool(getattr(args, "fsdp_cpu_offload", False)),
    }


def sync_bn(model: nn.Module, args: Any, mode: str) -> nn.Module:
    """``model`` with its BatchNorm layers as ``nn.SyncBatchNorm`` under ``--sync-bn`` in DDP (the
    same parameters: the optimizer's stay valid), else ``model``."""
    if getattr(args, "sync_bn", False) and mode == "ddp":
        return nn.SyncBatchNorm.convert_sync_batchnorm(model)
    return model


def has_batchnorm(model: nn.Module) -> bool:
    """Whether ``model`` has a BatchNorm layer (its statistics depend on the batch it sees)."""
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def micro_batch(args: Any, batch: int) -> int:
    """What one forward takes of ``batch`` images under ``--accum-steps`` (at least one)."""
    return max(1, batch // args.accum_steps)


def accumulation_record(args: Any, per_device_batch: int) -> dict[str, int]:
    """summary.json's ``accum_steps`` and ``micro_batch`` (a device's images per forward)."""
    return {"accum_steps": args.accum_steps, "micro_batch": micro_batch(args, per_device_batch)}


def micro_batches(
    x: torch.Tensor, y: torch.Tensor, n: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``x`` and ``y`` in ``n`` equal consecutive parts (the whole batch when ``n`` is 1)."""
    return [(x, y)] if n == 1 else list(zip(x.chunk(n), y.chunk(n)))


def forward_backward(
    loop: Any, x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A ``training.loop.Loop``'s forward and backward over ``--accum-steps`` micro-batches of this
    process's batch; the batch's mean loss and all its logits. Under DDP the gradients are
    all-reduced once, after the last micro-batch: the others run, forward included, inside
    ``no_sync()``; under FSDP they are reduce-scattered once, the others' skipped
    (``set_requires_gradient_sync(False)``, FSDP's own way)."""
    n, phase = loop.args.accum_steps, loop.prof.phase
    with phase("optimizer"):
        loop.optimizer.zero_grad(set_to_none=True)
    losses, outputs = [], []
    mode = loop.p.effective_mode
    for i, (xm, ym) in enumerate(micro_batches(x, y, n)):
        local = i < n - 1 and mode == "ddp"
        if mode == "fsdp" and n > 1:
            loop.model.set_requires_gradient_sync(i == n - 1)
        with loop.model.no_sync() if local else nullcontext():
            with phase("forward"), loop.autocast:
                logits = loop.model(xm)
                loss = loop.criterion(logits, ym)
            with phase("backward"):
                # each micro-batch's mean counts 1/n: the gradient of the whole batch's mean
                loop.scaler.scale(loss / n if n > 1 else loss).backward()
        losses.append(loss.detach())
        outputs.append(logits.detach())
    if n == 1:
        return losses[0], outputs[0]
    return torch.stack(losses).mean(), torch.cat(outputs)


def numerics_record(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """summary.json's ``tf32`` (``{"matmul", "cudnn"}``: whether fp32 matmuls and convolutions
    may run in TF32, so "fp32" says what it was), ``nccl_version`` (the NCCL this torch carries,
    ``"2.21.5"``; None where it has none) and ``nccl_env`` (every ``NCCL_*`` variable the
    process had)."""
    import os

    env = os.environ if environ is None else environ
    try:
        v = torch.cuda.nccl.version()
        version = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # a torch built without NCCL, or one that cannot load it
        version = None
    return {
        "tf32": {
            "matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn": bool(torch.backends.cudnn.allow_tf32),
        },
        "nccl_version": version,
        "nccl_env": {k: env[k] for k in sorted(env) if k.startswith("NCCL_")},
    }
