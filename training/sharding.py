"""FSDP (``--mode fsdp``): which blocks of a model are sharded, and the sharding itself.

PyTorch's FSDP2 (``torch.distributed.fsdp.fully_shard``) shards a module's parameters over the
ranks; each sharded module is one unit of communication: its parameters are all-gathered just
before its forward (and again before its backward, unless ``--reshard-after-forward off`` keeps
them, ZeRO-2-like), and its gradients reduce-scattered after its backward. The units are the
model's blocks, then the root (what the blocks leave: stem, head): ``units`` names them per
family by the blocks torchvision builds (``BLOCKS``: a ResNet's BasicBlock and Bottleneck, a ViT's
EncoderBlock, a ConvNeXt's CNBlock, MobileNet's and EfficientNet's inverted residuals, Swin's and
MaxViT's blocks, DenseNet's dense blocks, Inception's and GoogLeNet's branches); a model with none
of them (``tinycnn``) falls back on its parameter count: each direct child holding at least
``1/FALLBACK_SHARE`` of the model's parameters is a unit. Mixed precision is FSDP's own policy
(bf16 parameters in the forward and backward, fp32 gradients reduced and stepped); there is no
autocast around it. Accumulation skips the reduce-scatter on every micro-batch but the last
(``set_requires_gradient_sync``: ``training.knobs.forward_backward``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

BLOCKS = frozenset(
    {
        "BasicBlock",
        "Bottleneck",
        "EncoderBlock",
        "CNBlock",
        "InvertedResidual",
        "MBConv",
        "FusedMBConv",
        "SwinTransformerBlock",
        "SwinTransformerBlockV2",
        "MaxVitBlock",
        "_DenseBlock",
        "InceptionA",
        "InceptionB",
        "InceptionC",
        "InceptionD",
        "InceptionE",
        "Inception",
    }
)
FALLBACK_SHARE = 8


def units(model: nn.Module) -> list[nn.Module]:
    """The blocks of ``model`` to shard one by one, outermost first, before the root itself."""
    found: list[nn.Module] = []

    def walk(m: nn.Module) -> None:
        for child in m.children():
            if type(child).__name__ in BLOCKS:
                found.append(child)  # a block's own sub-blocks go with it
            else:
                walk(child)

    walk(model)
    if found:
        return found
    total = sum(p.numel() for p in model.parameters())
    return [
        c
        for c in model.children()
        if sum(p.numel() for p in c.parameters()) * FALLBACK_SHARE >= total > 0
    ]


def shard(
    model: nn.Module,
    device: torch.device,
    world_size: int,
    reshard_after_forward: bool = True,
    cpu_offload: bool = False,
    param_dtype: torch.dtype | None = None,
) -> nn.Module:
    """``model`` sharded in place over ``world_size`` ranks on ``device``'s type (the process
    group is up): each of ``units`` then the root; returned for the loop to train."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        MixedPrecisionPolicy,
        OffloadPolicy,
        fully_shard,
    )

    mesh = init_device_mesh(device.type, (world_size,))
    kw: dict[str, Any] = dict(
        mesh=mesh,
        reshard_after_forward=reshard_after_forward,
        mp_policy=MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
        if param_dtype is not None
        else MixedPrecisionPolicy(),
        offload_policy=CPUOffloadPolicy() if cpu_offload else OffloadPolicy(),
    )
    if param_dtype is not None:
        # BatchNorm's running statistics are buffers, which FSDP's policy does not cast: its
        # weight in bf16 beside fp32 buffers makes batch_norm refuse the mix ("expected scalar
        # type BFloat16 but found Float"). Sharded on their own in fp32 (torchtitan issue 674),
        # they take the block's half-precision input as batch_norm's mixed-type path allows.
        for norm in batchnorms(model):
            fully_shard(norm, **{**kw, "mp_policy": fp32_norm_policy()})
    for unit in units(model):
        fully_shard(unit, **kw)
    fully_shard(model, **kw)
    return model


def batchnorms(model: nn.Module) -> list[nn.Module]:
    """``model``'s BatchNorm layers (their statistics are fp32 buffers, whatever the policy)."""
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def fp32_norm_policy() -> Any:
    """The policy of a BatchNorm layer sharded apart: parameters and the reduction in fp32, and
    the input left as the block before it made it (``cast_forward_inputs=False``)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(
        param_dtype=torch.float32, reduce_dtype=torch.float32, cast_forward_inputs=False
    )


def full_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """The whole model's and optimizer's state, gathered from every rank onto the CPU (a
    collective: every rank calls it), keyed by parameter name as a single run's model is."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return (
        get_model_state_dict(model, options=full),
        get_optimizer_state_dict(model, optimizer, options=full),
    )


def load_full_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, model_state: dict, optim_state: dict
) -> None:
    """Put a gathered state (``full_state``'s, read from last.pt on every rank) back into the
    sharded model and its optimizer: each rank keeps its own shard."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    full = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, model_state, options=full)
    set_optimizer_state_dict(model, optimizer, optim_state, options=full)
