"""The trainer's models: its own small ones (``tinycnn``, ``tinyresnet``, ``tinyvit``,
``tinymobilenet``, ``tinyconvnext``) and every torchvision classification model.

Owns which names ``--model`` takes, the image size each needs, and building a
model for a number of input channels and classes. ``tinyresnet``, ``tinyvit``,
``tinymobilenet`` and ``tinyconvnext`` are a ResNet, a ViT, a MobileNetV3 and a ConvNeXt of
torchvision's own blocks at a size a CPU trains (and compiles) in seconds: the option matrix's
BatchNorm, LayerNorm, depthwise + SE and stochastic-depth families (``training.matrix``).
``tinycnn`` is deliberately free of BatchNorm and dropout: its forward pass is a pure
function of the weights and the batch, so a single-device run and a DDP run
over the same global batch produce the same losses (the trainer's exactness
test relies on it). The others are ``torchvision.models.list_models(module=
torchvision.models)`` (resnet50, mobilenet_v3_small, efficientnet_b0,
convnext_tiny, vit_b_16, ...), built with ``weights=None`` (never downloads)
and ``num_classes`` from the dataset; their first convolution is replaced
when the images are not RGB, and GoogLeNet/Inception are built without
their auxiliary heads (training would return a tuple, not logits). The
smallest image each takes is torchvision's own ``min_size`` from the model's
weight metadata; ViT and MaxViT take exactly that size and no other
(``check`` refuses any other with a ``BadInput`` naming the size, instead of
a shape error on the first step).
"""

from __future__ import annotations

import torch
from torch import nn

from training.cli import BadInput
from training.model_names import OWN, input_size, names

# Training mode would return (logits, aux logits) instead of the logits.
_NO_AUX = {
    "googlenet": dict(aux_logits=False, init_weights=True),
    "inception_v3": dict(aux_logits=False, init_weights=True),
}


class TinyCNN(nn.Module):
    """Two conv layers and a linear head; works for any image size of 4 or more."""

    def __init__(self, channels: int, num_classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(channels, 16, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(2),
        )
        self.head = nn.Linear(32 * 2 * 2, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


class TinyViT(nn.Module):
    """A vision transformer small enough for a CPU: 4x4 patches of 32 channels, a depthwise
    convolution as position code (so any image size of 4 or more works), two of torchvision's own
    ``EncoderBlock`` (LayerNorm, attention, MLP: what FSDP shards as units of a ViT), a LayerNorm
    and a linear head over the mean token. The LayerNorm family of the option matrix."""

    def __init__(self, channels: int, num_classes: int, dim: int = 32, depth: int = 2) -> None:
        super().__init__()
        from torchvision.models.vision_transformer import EncoderBlock

        self.patches = nn.Conv2d(channels, dim, 4, stride=4)
        self.position = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.blocks = nn.Sequential(
            *(EncoderBlock(2, dim, 2 * dim, 0.0, 0.0) for _ in range(depth))
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patches(x)
        x = (x + self.position(x)).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(x)).mean(1))


class TinyResNet(nn.Module):
    """A ResNet small enough for a CPU: a 3x3 stem of 16 channels with BatchNorm, then two of
    torchvision's own ``BasicBlock`` (16 channels, then 32 at stride 2 with its 1x1 shortcut):
    BatchNorm's running statistics are buffers, the trap of FSDP's half-precision policy. The
    BatchNorm family of the option matrix's CPU tier; any image size of 4 or more."""

    def __init__(self, channels: int, num_classes: int) -> None:
        super().__init__()
        from torchvision.models.resnet import BasicBlock

        self.stem = nn.Sequential(
            nn.Conv2d(channels, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU()
        )
        shortcut = nn.Sequential(nn.Conv2d(16, 32, 1, stride=2, bias=False), nn.BatchNorm2d(32))
        self.blocks = nn.Sequential(BasicBlock(16, 16), BasicBlock(16, 32, 2, shortcut))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


def tiny_mobilenet(channels: int, num_classes: int) -> nn.Module:
    """torchvision's ``MobileNetV3`` at two inverted residuals of its own kind (depthwise 3x3, the
    second with squeeze-excitation and hardswish) and a 64-wide head: the depthwise + SE family of
    the option matrix's CPU tier; any image size of 4 or more."""
    from torchvision.models.mobilenetv3 import InvertedResidualConfig, MobileNetV3

    setting = [
        InvertedResidualConfig(16, 3, 16, 16, False, "RE", 2, 1, 1.0),
        InvertedResidualConfig(16, 3, 48, 24, True, "HS", 2, 1, 1.0),
    ]
    model = MobileNetV3(setting, last_channel=64, num_classes=num_classes)
    if channels != 3:
        _first_conv_for(model, channels)
    return model


def tiny_convnext(channels: int, num_classes: int) -> nn.Module:
    """torchvision's ``ConvNeXt`` at two stages of 16 and 32 channels, one ``CNBlock`` each, with
    stochastic depth (0.1): each block's ``StochasticDepth`` holds its own probability, the float
    attribute that makes compiled blocks differ; any image size of 8 or more. The stochastic-depth
    family of the option matrix."""
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    setting = [CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)]
    model = ConvNeXt(setting, stochastic_depth_prob=0.1, num_classes=num_classes)
    if channels != 3:
        _first_conv_for(model, channels)
    return model


def check(name: str, image_size: int) -> None:
    """``BadInput`` (naming the fix) when ``name`` is unknown or cannot take ``image_size``
    images."""
    if name not in OWN and name not in names():  # tinycnn imports no torchvision
        raise BadInput(
            f"unknown --model {name!r}: use tinycnn or a name of torchvision.models.list_models(), "
            "e.g. resnet18, mobilenet_v3_small, vit_b_16"
        )
    need, exact = input_size(name)
    if exact and image_size != need:
        raise BadInput(
            f"{name} takes {need}x{need} images only, --image-size {image_size} given: use "
            f"--image-size {need}"
        )
    if image_size < need:
        raise BadInput(
            f"{name} needs images of at least {need}x{need}, --image-size {image_size} given: "
            f"use --image-size {need} or more"
        )


def _first_conv_for(model: nn.Module, channels: int) -> None:
    """Replace the first 3-channel convolution by one that takes ``channels`` (same shape
    otherwise)."""
    for parent in model.modules():
        for child_name, child in parent.named_children():
            if isinstance(child, nn.Conv2d) and child.in_channels == 3:
                setattr(
                    parent,
                    child_name,
                    nn.Conv2d(
                        channels,
                        child.out_channels,
                        child.kernel_size,
                        child.stride,
                        child.padding,
                        child.dilation,
                        bias=child.bias is not None,
                        padding_mode=child.padding_mode,
                    ),
                )
                return
    raise BadInput(
        f"cannot adapt {type(model).__name__} to {channels}-channel images: use an RGB dataset"
    )


def build(name: str, channels: int, num_classes: int) -> nn.Module:
    """A freshly initialised model; seed torch before calling for identical weights."""
    if name == "tinycnn":
        return TinyCNN(channels, num_classes)
    if name == "tinyvit":
        return TinyViT(channels, num_classes)
    if name == "tinyconvnext":
        return tiny_convnext(channels, num_classes)
    if name == "tinyresnet":
        return TinyResNet(channels, num_classes)
    if name == "tinymobilenet":
        return tiny_mobilenet(channels, num_classes)
    if name not in names():
        raise ValueError(f"unknown model {name!r}")
    import torchvision.models as tvm

    model = tvm.get_model(name, weights=None, num_classes=num_classes, **_NO_AUX.get(name, {}))
    if channels != 3:
        _first_conv_for(model, channels)
    return model
