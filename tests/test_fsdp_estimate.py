"""The fsdp memory estimate follows what FSDP2 holds (issue 53; training.memory's docstring names
the torch code): no autocast copy of the weights, the whole fp32 gradients while accumulating, and
only the gathered parameters and activations on the device under ``--fsdp-cpu-offload``. The same
figures reach the lab's pre-flight (``lab.engine.preflight.estimate.per_gpu``). No process."""

from __future__ import annotations

import dataclasses

from lab.engine.preflight import estimate
from lab.engine.spec.run import RunConfig
from training import memory

# model, channels, classes, batch per device, image size
ARGS = ("resnet18", 3, 10, 16, 32)


def _one(mode: str, **kw) -> dict[str, int]:
    model, channels, classes, batch, size = ARGS
    shards = 2 if mode == "fsdp" else 1
    return memory.estimate_bytes(
        mode, 2, batch, model, channels, classes, size, shards=shards, **kw
    )[0]


def test_fsdp_bf16_has_no_autocast_weight_copy_only_its_gathered_half_block():
    ddp, fsdp = _one("ddp", precision="bf16"), _one("fsdp", precision="bf16")
    copy = ddp["parameters"] // 2  # autocast's half weights: DDP's, not FSDP's
    assert fsdp["activations"] == ddp["activations"] - copy
    half, full = _one("fsdp", precision="bf16"), _one("fsdp")
    assert 2 * half["gathered"] == full["gathered"]  # the policy's cast, counted there once


def test_fsdp_accumulation_keeps_the_whole_fp32_gradients_on_every_rank():
    plain, accum = _one("fsdp"), _one("fsdp", accum_steps=2)
    whole = _one("ddp")["gradients"]
    assert plain["gradients"] == -(-whole // 2)  # reduce-scattered every step: a shard
    assert accum["gradients"] == whole  # set_requires_gradient_sync(False): unsharded
    bf16 = _one("fsdp", precision="bf16", accum_steps=4)
    assert bf16["gradients"] == whole  # upcast to the fp32 reduce_dtype, still whole
    assert {k: v for k, v in accum.items() if k != "gradients"} == {
        k: v for k, v in plain.items() if k != "gradients"
    }


def test_fsdp_cpu_offload_leaves_the_gathered_parameters_and_activations_on_the_device():
    plain, off = _one("fsdp"), _one("fsdp", cpu_offload=True)
    assert (off["parameters"], off["gradients"], off["optimizer"]) == (0, 0, 0)
    assert off["gathered"] == plain["gathered"] > 0
    assert off["activations"] == plain["activations"]
    accum = _one("fsdp", cpu_offload=True, accum_steps=2)
    assert accum["gradients"] == _one("ddp")["gradients"]  # accumulated on the device


def test_the_preflight_gives_the_same_fsdp_figures():
    c = RunConfig(mode="fsdp", gpus=(0, 1), nproc=2, batch_size=64, model="resnet18")
    base = estimate.per_gpu(c)[0]
    off = estimate.per_gpu(dataclasses.replace(c, fsdp_cpu_offload=True))[0]
    assert off.params_mib == off.optimizer_mib == off.grads_mib == 0
    assert off.gathered_mib == base.gathered_mib and off.total_mib < base.total_mib
    accum = estimate.per_gpu(dataclasses.replace(c, accum_steps=2))[0]
    assert accum.grads_mib == 2 * base.grads_mib == base.params_mib * 2
    bf16 = estimate.per_gpu(dataclasses.replace(c, precision="bf16"))[0]
    ddp = estimate.per_gpu(dataclasses.replace(c, mode="ddp", precision="bf16"))[0]
    half_batch = estimate.per_gpu(dataclasses.replace(c, mode="ddp", accum_steps=1))[0]
    assert bf16.activations_mib < ddp.activations_mib  # no autocast copy under fsdp
    assert half_batch.params_mib == 2 * base.params_mib
