"""training/models.py: every torchvision classification model by name, their input sizes, and real
runs.

The unit part asks torchvision itself: the names are its list, the smallest
size we accept really runs a forward pass and one pixel less really fails
(so the ``min_size`` we read from the weights' metadata is the truth, not a
guess), grey images get a first convolution that takes one channel, and
GoogLeNet/Inception give plain logits in training mode. The run part starts
the real trainer on the CPU (one process, then two gloo ranks under
torchrun) for a few steps of ``resnet18``, ``mobilenet_v3_small`` and
``vit_b_16`` at its one size (224, batch 2, 2 steps) on a tiny folder of
grey images, and reads summary.json back.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.train_ddp import torchrun
from training import models
from training.cli import BadInput

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}


def test_names_are_tinycnn_then_torchvisions_list():
    import torchvision.models as tvm

    own = ("tinycnn", "tinyresnet", "tinyvit", "tinymobilenet", "tinyconvnext")
    assert models.names() == (*own, *tvm.list_models(module=tvm))
    assert {
        "resnet18",
        "resnet50",
        "mobilenet_v3_small",
        "efficientnet_b0",
        "convnext_tiny",
        "vit_b_16",
    } <= set(models.names())


@pytest.mark.parametrize(
    "name,size,exact",
    [
        ("tinycnn", 4, False),
        ("resnet18", 1, False),
        ("alexnet", 63, False),
        ("inception_v3", 75, False),
        ("vit_b_16", 224, True),
        ("maxvit_t", 224, True),
        ("swin_v2_t", 256, False),
    ],
)
def test_input_sizes_come_from_torchvision(name, size, exact):
    assert models.input_size(name) == (size, exact)


@pytest.mark.parametrize("name", ["alexnet", "densenet121", "inception_v3", "vit_b_32"])
def test_the_smallest_size_runs_and_one_less_fails(name):
    """The refusal is not a guess: at the size we accept a forward pass works, below it torch
    raises."""
    torch.manual_seed(0)
    need, exact = models.input_size(name)
    model = models.build(name, 3, 4).eval()
    with torch.no_grad():
        assert model(torch.zeros(1, 3, need, need)).shape == (1, 4)
        with pytest.raises((RuntimeError, ValueError, AssertionError)):  # vit asserts, convs raise
            model(torch.zeros(1, 3, need - 1, need - 1))
    with pytest.raises(BadInput, match=f"use --image-size {need}"):
        models.check(name, need - 1)
    models.check(name, need)


def test_check_names_the_fix():
    with pytest.raises(BadInput, match=r"unknown --model 'vgg'.*list_models"):
        models.check("vgg", 32)
    with pytest.raises(
        BadInput,
        match=r"vit_b_16 takes 224x224 images only, --image-size 256 given: use --image-size 224",
    ):
        models.check("vit_b_16", 256)
    with pytest.raises(BadInput, match=r"inception_v3 needs images of at least 75x75"):
        models.check("inception_v3", 32)
    models.check("resnet50", 8)
    models.check("tinycnn", 4)


def test_grey_images_get_a_one_channel_first_convolution():
    torch.manual_seed(0)
    for name in ("resnet18", "mobilenet_v3_small", "efficientnet_b0"):
        model = models.build(name, 1, 7)
        first = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
        assert first.in_channels == 1, name
        assert model(torch.zeros(2, 1, 32, 32)).shape == (2, 7), name


def test_resnet18_weights_are_the_same_as_before_for_a_seed():
    """The generic conv swap makes the same resnet18 as the old hand-made one (same draws, same
    order)."""
    from torchvision.models import resnet18

    torch.manual_seed(5)
    old = resnet18(weights=None, num_classes=10)
    old.conv1 = torch.nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
    torch.manual_seed(5)
    new = models.build("resnet18", 1, 10)
    for (k, a), (k2, b) in zip(old.state_dict().items(), new.state_dict().items()):
        assert k == k2 and torch.equal(a, b), k


@pytest.mark.parametrize("name", ["googlenet", "inception_v3"])
def test_auxiliary_heads_are_off_so_training_returns_logits(name):
    model = models.build(name, 3, 5).train()
    out = model(torch.zeros(2, 3, 75, 75))
    assert isinstance(out, torch.Tensor) and out.shape == (2, 5)


# ---- real runs ------------------------------------------------------------


@pytest.fixture(scope="module")
def grey_folder(tmp_path_factory) -> Path:
    """train/<class>/ 4 grey 8x8 images each, val/<class>/ 1 each: the smallest set every model can
    train on."""
    from PIL import Image

    root = tmp_path_factory.mktemp("grey")
    for split, n in (("train", 4), ("val", 1)):
        for label in ("a", "b"):
            (root / split / label).mkdir(parents=True)
            for i in range(n):
                Image.new("L", (8, 8), color=40 * i + (100 if label == "b" else 0)).save(
                    root / split / label / f"{i}.png"
                )
    return root


def train(run: Path, folder: Path, model: str, nproc: int, *opts: str) -> dict:
    """The trainer for 2 steps, alone or as ``nproc`` gloo ranks under torchrun; its
    summary.json."""
    opts = (
        "--model", model, "--dataset", f"imagefolder:{folder}", "--max-steps", "2",
        "--log-every", "1", "--checkpoint", "none", "--device", "cpu", *opts,
    )  # fmt: skip
    if nproc == 1:
        cmd = [sys.executable, "-m", "training.train", "--log-dir", str(run), *opts]
    else:
        cmd = torchrun("ddp", run, *opts, nproc=nproc)
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun's workers too
        out, _ = proc.communicate()
    assert proc.returncode == 0, out[-3000:]
    return json.loads((run / "summary.json").read_text())


def _check(summary: dict, model: str, world: int) -> None:
    assert summary["config"]["model"] == model and summary["world_size"] == world
    assert summary["steps"] == 2 and summary["completed"]
    # a number, not NaN
    assert summary["final"]["train_loss"] == pytest.approx(summary["final"]["train_loss"])


@pytest.mark.proc
@pytest.mark.slow
@pytest.mark.parametrize("model", ["resnet18", "mobilenet_v3_small"])
@pytest.mark.parametrize("nproc", [1, 2], ids=["single", "ddp2"])
def test_cnn_trains_in_single_and_ddp(tmp_path, grey_folder, model, nproc):
    _check(
        train(
            tmp_path / "run", grey_folder, model, nproc, "--batch-size", "4", "--image-size", "32"
        ),
        model,
        nproc,
    )


@pytest.mark.proc
@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2], ids=["single", "ddp2"])
def test_vit_b_16_trains_at_its_one_size(tmp_path, grey_folder, nproc):
    _check(
        train(
            tmp_path / "run",
            grey_folder,
            "vit_b_16",
            nproc,
            "--batch-size",
            "2",
            "--image-size",
            "224",
        ),
        "vit_b_16",
        nproc,
    )
