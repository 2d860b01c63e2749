"""Memory anatomy: what each device of a run should hold (the estimate) beside what it held.

``forward_bytes`` is the estimate's one computation, shared with the lab's pre-flight
(``lab.engine.preflight.estimate`` calls it): parameters, gradients, the optimizer's state (the
trainer's SGD with momentum keeps one buffer per parameter) and one batch of activations, every
tensor autograd saves for the backward of one forward and loss, each storage counted once and the
parameters left out (``torch.autograd.graph.saved_tensors_hooks``). The forward runs the model on
PyTorch's ``meta`` device: the same operators, shapes and saved tensors as on the CPU, nothing
allocated. With AMP the activations are half precision plus autocast's copy of the weights
(``weight_copy``; none under FSDP, which runs without autocast).

``estimate_bytes`` spreads it over the run's devices the way each mode does, honouring every knob
(precision, the accumulation's micro-batch, DDP's buckets unless ``--grad-as-bucket-view``): the
one estimate, used by ``device_estimates`` (summary.json) and the lab's pre-flight alike. single,
everything at the micro-batch; DDP, the whole model at its share on every rank plus its gradient
buckets; DP, every device a replica's parameters and gradients and its share of the micro-batch,
and device 0 the extra the seeds name: the optimizer's state (only the module on device 0 is
stepped), one more gradient-sized buffer (NCCL's reduce-add sums the replicas' gradients into one
buffer there), the whole input micro-batch it scatters, the outputs gathered back to it and the
loss. FSDP: every rank a ``shards``-th of the parameters, gradients and optimizer state, plus the
parameters all-gathered in flight (``gathered_bytes``: the root's, which FSDP2 keeps gathered from
its forward to its backward, and the largest block's, in the compute precision; with
``--reshard-after-forward off`` every block's, since none is freed until its backward).

What FSDP2 holds (torch 2.14.1, ``torch/distributed/fsdp/_fully_shard/``), which the fsdp estimate
follows: no autocast (``training.knobs.autocast`` is off under fsdp): ``MixedPrecisionPolicy``
casts each shard to ``param_dtype`` as it is all-gathered (``FSDPParam.all_gather_inputs``), so
the half weights are the gathered block, already at 2 bytes a parameter, and there is no other
half copy. Under accumulation, ``set_requires_gradient_sync(False)`` turns ``reduce_grads`` off:
``FSDPParamGroup.post_backward`` then returns before the reduce-scatter and keeps each unsharded
gradient (``unsharded_param.grad``, or ``unsharded_accumulated_grad`` upcast to the fp32
``reduce_dtype``) on every rank until the last micro-batch's backward scatters it: the whole fp32
gradients, not a shard. ``CPUOffloadPolicy`` (``--fsdp-cpu-offload``) keeps the sharded
parameters on the CPU (``FSDPParam._init_sharded_param``), copies them to the device only to
all-gather them, and offloads the reduced gradient shards (``foreach_reduce``); the optimizer
steps the CPU shards, so its state is there too: the device holds the gathered parameters, the
activations and, while accumulating, the unsharded gradients.

What is measured (``Measure``): on CUDA the caching allocator's peak
(``torch.cuda.max_memory_allocated``), from a baseline of what was allocated before the model was
built; the CUDA context and the allocator's reserve come on top and are not counted. On the CPU
the process's resident set: the peak is Linux's ``VmHWM``, reset to the current resident set just
before the model is built (``/proc/self/clear_refs``), and the baseline is the resident set then
(the interpreter, torch's libraries, the data set), so peak - baseline is what training added.
DataLoader workers are other processes and not counted. Where the reset is refused the peak is
the process's lifetime peak (``ru_maxrss``) and ``reset`` says so. So that the resident set follows
what is live, ``Measure`` first sets glibc's mmap threshold on the CPU (``follow_live_heap``:
``mallopt(M_MMAP_THRESHOLD, 65536)``, what ``MALLOC_MMAP_THRESHOLD_=65536`` does): every block of
64 KiB or more is then its own mapping, given back to the system when freed, where glibc's default
(a threshold that rises with each freed block, up to 32 MiB) keeps freed tensors in its heap and the
peak counts them again; FSDP frees and allocates its gathered blocks every step, so without it its
peak reads above DDP's. summary.json's ``memory.cpu_allocator`` records it.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import torch
from torch import nn

from training import models, sharding
from training.metrics import local_memory_mib

MIB = 2**20
PARTS = ("parameters", "gradients", "optimizer", "activations")
DP_EXTRA = ("replica_gradients", "input_batch", "gathered_outputs", "loss")
M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD = 65536


def forward_bytes(
    model: str,
    channels: int,
    classes: int,
    batch: int,
    image_size: int,
    amp: bool = False,
    weight_copy: bool = True,
) -> dict[str, int]:
    """Bytes of ``PARTS`` for ``model`` at ``batch`` images of ``image_size`` px (one device).
    ``amp``: the forward in half precision; ``weight_copy``: and autocast's half copy of the
    weights with it (False under FSDP: its policy casts the gathered parameters instead)."""
    dtype = torch.float16 if amp else torch.float32
    with torch.device("meta"):
        net = models.build(model, channels, classes)
    param_bytes = sum(p.numel() * 4 for p in net.parameters())  # float32 master weights
    net = net.to(dtype)
    own = {p.untyped_storage()._cdata for p in net.parameters()}
    saved: dict[int, int] = {}
    kept = []  # meta tensors cost nothing: holding them keeps each storage's identity unique

    def pack(t):
        kept.append(t)
        s = t.untyped_storage()
        if s._cdata not in own:
            saved[s._cdata] = s.nbytes()
        return t

    x = torch.randn(batch, channels, image_size, image_size, device="meta", dtype=dtype)
    y = torch.randint(0, classes, (batch,), device="meta")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        nn.functional.cross_entropy(net(x), y)
    act = sum(saved.values()) + (param_bytes // 2 if amp and weight_copy else 0)  # autocast's
    return {
        "parameters": param_bytes,
        "gradients": param_bytes,
        "optimizer": param_bytes,
        "activations": act,
    }


def gathered_bytes(
    model: str, channels: int, classes: int, half: bool, reshard_after_forward: bool = True
) -> int:
    """Bytes of FSDP's all-gathered parameters in flight on each rank at the peak: the root's own
    parameters (FSDP2 does not reshard the root after its forward: its backward comes next) and the
    largest block's (every block's when ``reshard_after_forward`` is False), at 2 bytes a
    parameter under bf16's policy, else 4. Prefetching can hold one more block; not counted."""
    with torch.device("meta"):
        net = models.build(model, channels, classes)
    blocks = [sum(p.numel() for p in u.parameters()) for u in sharding.units(net)]
    root = sum(p.numel() for p in net.parameters()) - sum(blocks)
    held = sum(blocks) if not reshard_after_forward else max(blocks, default=0)
    return (root + held) * (2 if half else 4)


def estimate_bytes(
    mode: str,
    devices: int,
    batch: int,
    model: str,
    channels: int,
    classes: int,
    image_size: int,
    precision: str = "fp32",
    grad_as_bucket_view: bool = False,
    shards: int = 1,
    reshard_after_forward: bool = True,
    accum_steps: int = 1,
    cpu_offload: bool = False,
) -> list[dict[str, int]]:
    """Bytes by part on each of a run's ``devices`` (device 0 first): the one estimate of the
    trainer's summary.json and the lab's pre-flight (``lab.engine.preflight.estimate.per_gpu``).

    ``batch`` is what each device's forward takes: its share of the optimizer step's batch, or of
    one micro-batch under gradient accumulation (the activations are a forward's); fp16 and bf16
    halve them (autocast, plus its half copy of the weights). single: one device. DDP: every rank
    the whole model plus its gradient buckets (none with ``grad_as_bucket_view``: the gradients are
    views into the buckets). DP: every device a replica's parameters and gradients and its share;
    device 0 the optimizer's state, one more gradient-sized buffer (the sum NCCL's reduce-add
    writes there; the replicas' own gradients stay on their GPUs), the whole micro-batch it
    scatters, the outputs gathered back to it and the loss. FSDP (what FSDP2 holds: the module's
    docstring): every rank a ``shards``-th of the parameters, gradients and optimizer state, plus
    the parameters all-gathered in flight (``gathered_bytes``), and no autocast copy of the
    weights; with ``accum_steps`` above 1 the whole fp32 gradients (unsharded until the last
    micro-batch); with ``cpu_offload`` the shards and the optimizer's state on the CPU, not here.
    """
    half = precision in ("fp16", "bf16")
    micro = max(1, batch)
    b = forward_bytes(model, channels, classes, micro, image_size, half, mode != "fsdp")
    if mode == "ddp":
        return [{**b, "buckets": 0 if grad_as_bucket_view else b["gradients"]}] * devices
    if mode == "fsdp":  # parameters, gradients and optimizer state each split over the ranks
        n = max(1, shards)
        split = {k: -(-b[k] // n) for k in ("parameters", "gradients", "optimizer")}
        if accum_steps > 1:  # set_requires_gradient_sync(False): unsharded fp32 gradients
            split["gradients"] = b["gradients"]
        gathered = gathered_bytes(model, channels, classes, half, reshard_after_forward)
        if cpu_offload:  # the device all-gathers from the CPU's shards, even on one rank
            off = {"parameters": 0, "optimizer": 0}
            off["gradients"] = split["gradients"] if accum_steps > 1 else 0
            return [{**b, **off, "gathered": gathered}] * devices
        return [{**b, **split, "gathered": gathered if n > 1 else 0}] * devices
    if mode == "dp" and devices > 1:
        batch = micro * devices
        first = {
            **b,
            "replica_gradients": b["gradients"],
            "input_batch": batch * channels * image_size * image_size * 4,
            "gathered_outputs": batch * classes * (2 if half else 4),
            "loss": 4,
        }
        return [first] + [{**b, "optimizer": 0}] * (devices - 1)
    return [b]


def _mib(parts: dict[str, float]) -> dict[str, float]:
    out = {k: round(v / MIB, 3) for k, v in parts.items()}
    out["total"] = round(sum(parts.values()) / MIB, 3)
    return out


def device_estimates(
    placement: Any,
    model: str,
    channels: int,
    classes: int,
    image_size: int,
    precision: str = "fp32",
    micro_batch: int | None = None,
    grad_as_bucket_view: bool = False,
    reshard_after_forward: bool = True,
    accum_steps: int = 1,
    cpu_offload: bool = False,
) -> dict[str, dict[str, float]]:
    """This process's devices: ``{name: {part: MiB, ..., "total": MiB}}`` (``placement`` is a
    ``training.distributed.Placement``; ``precision`` as it runs, fp32, fp16 or bf16;
    ``micro_batch``: what a forward takes per device under accumulation, else the whole share;
    ``accum_steps`` and ``cpu_offload``: what FSDP keeps on the device, ``estimate_bytes``)."""
    names = placement.device_names
    parts = estimate_bytes(
        placement.effective_mode,
        len(names),
        micro_batch or placement.per_device_batch,
        model,
        channels,
        classes,
        image_size,
        precision,
        grad_as_bucket_view,
        getattr(placement, "world_size", 1),  # what FSDP shards over
        reshard_after_forward,
        accum_steps,
        cpu_offload,
    )
    return {n: _mib(p) for n, p in zip(names, parts)}


def follow_live_heap() -> dict[str, int] | None:
    """glibc's mmap threshold set to ``MMAP_THRESHOLD``, so that freed blocks of that size or more
    go back to the system and the resident set follows what is live (the module says why);
    ``{"mmap_threshold": bytes}``, or None where the C library has no ``mallopt`` or refuses."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):  # not glibc (musl, macOS): the resident set as it comes
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1:
        return None
    return {"mmap_threshold": MMAP_THRESHOLD}


class Measure:
    """The baseline taken before the model is built, and the peaks since (see the module); on the
    CPU it first makes the resident set follow what is live (``follow_live_heap``:
    ``allocator``, summary.json's ``memory.cpu_allocator``; None on CUDA)."""

    def __init__(self, placement: Any) -> None:
        self.placement = placement
        self.cuda = placement.device.type == "cuda"
        self.reset = False
        self.allocator: dict[str, int] | None = None
        if self.cuda:
            ids = placement.device_ids or [placement.device.index or 0]
            self.baseline = {
                n: torch.cuda.memory_allocated(i) / MIB for n, i in zip(placement.device_names, ids)
            }
            return
        self.allocator = follow_live_heap()  # before the reset and the baseline
        try:  # Linux 4.0+: "5" resets the peak resident set (VmHWM) to the current one
            Path("/proc/self/clear_refs").write_text("5")
            self.reset = True
        except OSError:
            pass
        self.baseline = {n: v["allocated"] for n, v in local_memory_mib(placement).items()}

    def peaks(self) -> dict[str, dict[str, float]]:
        """``{name: {"peak": MiB, "baseline": MiB}}`` of this process's devices."""
        p = self.placement
        if self.cuda:
            ids = p.device_ids or [p.device.index or 0]
            return {
                n: {"peak": torch.cuda.max_memory_allocated(i) / MIB, "baseline": self.baseline[n]}
                for n, i in zip(p.device_names, ids)
            }
        # rss, and the peak: VmHWM (since the reset, when it was taken), else the lifetime peak
        (name, now), *_ = local_memory_mib(p).items()
        return {name: {"peak": now["peak"], "baseline": self.baseline[name]}}

    def measured(self) -> str:
        """In words, what ``peak_mib`` is for these devices."""
        if self.cuda:
            return "cuda: torch.cuda.max_memory_allocated; baseline: allocated before the model"
        since = "since just before the model was built" if self.reset else "of the whole process"
        heap = (
            f"; freed blocks of {self.allocator['mmap_threshold'] // 1024} KiB or more given back "
            "(glibc mmap threshold)"
            if self.allocator
            else ""
        )
        return (
            f"cpu: the process's peak resident set (VmHWM) {since}; baseline: its resident set "
            f"then (interpreter, libraries, data); DataLoader workers not counted{heap}"
        )


def block(
    per_device: dict[str, dict[str, Any]],
    measured: str,
    cpu_allocator: dict[str, int] | None = None,
) -> dict[str, Any]:
    """summary.json's ``memory`` from ``{name: {"estimate": {...}, "peak", "baseline"}}``; ``ratio``
    is (peak - baseline) / estimated total; ``cpu_allocator`` (``Measure.allocator``), where the
    CPU's C library was told to give freed blocks back, is kept as it is."""
    est = {n: d["estimate"] for n, d in per_device.items()}
    peak = {n: round(d["peak"], 3) for n, d in per_device.items()}
    base = {n: round(d["baseline"], 3) for n, d in per_device.items()}
    ratio = {
        n: round((peak[n] - base[n]) / est[n]["total"], 4) if est[n].get("total") else None
        for n in per_device
    }
    out = {
        "estimate_mib": est,
        "peak_mib": peak,
        "baseline_mib": base,
        "ratio": ratio,
        "measured": measured,
    }
    if cpu_allocator:
        out["cpu_allocator"] = dict(cpu_allocator)
    return out


def local(estimates: dict[str, dict[str, float]], measure: Measure) -> dict[str, dict[str, Any]]:
    """This process's part of ``block``'s input."""
    return {n: {"estimate": estimates.get(n, {}), **v} for n, v in measure.peaks().items()}


OOM_NOTE = (
    "out of memory comes when the caching allocator cannot reserve more: peak_reserved_mib "
    "(torch.cuda.max_memory_reserved) plus the CUDA context and NCCL's buffers (NVML's per-process "
    "used memory counts them all) decides it, not peak_mem_mib (max_memory_allocated)"
)


def reserved_record(mem: dict[str, dict[str, float]]) -> dict[str, Any]:
    """summary.json's additive ``peak_reserved_mib`` (``{device: MiB}``: the allocator's reserve at
    its peak, ``torch.cuda.max_memory_reserved``; the peak resident set on the CPU) and
    ``oom_note`` (which figure decides out-of-memory)."""
    return {
        "peak_reserved_mib": {
            d: round(v.get("peak_reserved", v["peak"]), 1) for d, v in sorted(mem.items())
        },
        "oom_note": OOM_NOTE,
    }
