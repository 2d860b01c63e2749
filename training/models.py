"""The trainer's models: ``tinycnn`` and torchvision's ``resnet18``.

Owns building a model for a number of input channels and classes.
``tinycnn`` is deliberately free of BatchNorm and dropout: its forward pass is
a pure function of the weights and the batch, so a single-device run and a
DDP run over the same global batch produce the same losses (the trainer's
exactness test relies on it). ``resnet18`` comes from torchvision with
``weights=None`` (never downloads); its first convolution is replaced when the
images are not RGB. Tested by tests/test_train_ddp.py (DDP reproduces the
single-device losses) and tests/test_train_run.py (a run learns).
"""
from __future__ import annotations

import torch
from torch import nn


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


def build(name: str, channels: int, num_classes: int) -> nn.Module:
    """A freshly initialised model; seed torch before calling for identical weights."""
    if name == "tinycnn":
        return TinyCNN(channels, num_classes)
    if name == "resnet18":
        from torchvision.models import resnet18

        model = resnet18(weights=None, num_classes=num_classes)
        if channels != 3:
            model.conv1 = nn.Conv2d(channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
        return model
    raise ValueError(f"unknown model {name!r}")
