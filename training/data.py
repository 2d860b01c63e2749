"""Datasets of the trainer: ``digits``, ``synthetic`` and ``imagefolder:PATH``.

Owns turning a ``--dataset`` spec into a train and a validation set of
``(image, label)`` pairs, images as float tensors ``C x N x N`` scaled to
[-1, 1]. Image folders are read with a tiny PIL loader (no torchvision
transforms, so nothing downloads and nothing is random): ``PATH/train/<class>``
and ``PATH/val/<class>``, or ``PATH/<class>`` with every fifth image of each
class held out. Small sets (the digits) are decoded and resized once into
memory and served a whole batch at a time through ``__getitems__``, so the
data loader costs next to nothing per step; large ones are decoded lazily.
``synthetic`` is deterministic random tensors with a learnable class signal
(made per index when too big to hold in memory, e.g. at 224x224).
Every failure is a ``BadInput`` naming the folder. Also owns the sampler that
skips what a resumed run already trained on (``ResumableSampler``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset, DistributedSampler, Sampler

from training.cli import BadInput

DIGITS_DIR = Path(__file__).resolve().parent.parent / "sample_data" / "digits"
IMAGE_EXTS = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".pgm", ".ppm"}
PRELOAD_LIMIT_BYTES = 512 * 2**20  # decoded float32 tensors kept in memory up to this size
SYNTHETIC_TRAIN, SYNTHETIC_VAL, SYNTHETIC_CLASSES = 2048, 512, 10


@dataclass
class DataBundle:
    """What the loop needs to know about the data."""

    train: Dataset
    val: Dataset
    num_classes: int
    channels: int
    name: str


class TensorImages(Dataset):
    """Images and labels held in two tensors; ``__getitems__`` serves a batch in one index."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[i], self.labels[i]

    def __getitems__(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(indices, dtype=torch.long)
        return self.images[idx], self.labels[idx]


class LazyImages(Dataset):
    """Image files decoded on demand (for folders too big to hold in memory)."""

    def __init__(self, files: list[tuple[Path, int]], size: int, mode: str) -> None:
        self.files, self.size, self.mode = files, size, mode

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        path, label = self.files[i]
        return _decode(path, self.size, self.mode), torch.tensor(label)


class ResumableSampler(Sampler):
    """A ``DistributedSampler`` that can skip the samples already trained on after a resume."""

    def __init__(self, inner: DistributedSampler) -> None:
        self.inner, self.skip = inner, 0

    def set_epoch(self, epoch: int) -> None:
        self.inner.set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(iter(self.inner), self.skip, None)

    def __len__(self) -> int:
        return len(self.inner) - self.skip


def collate(batch: Any) -> Any:
    """Pass ``TensorImages`` batches through; stack lists of samples otherwise."""
    if isinstance(batch, tuple):
        return batch
    return torch.utils.data.default_collate(batch)


def _decode(path: Path, size: int, mode: str) -> torch.Tensor:
    with Image.open(path) as im:
        im = im.convert(mode)
        if im.size != (size, size):
            im = im.resize((size, size), Image.BILINEAR)
        arr = np.asarray(im, dtype=np.float32)
    if arr.ndim == 2:
        arr = arr[None]
    else:
        arr = arr.transpose(2, 0, 1)
    return torch.from_numpy((arr / 127.5) - 1.0)


def _class_files(root: Path, classes: list[str]) -> list[tuple[Path, int]]:
    files = []
    for label, name in enumerate(classes):
        if not (root / name).is_dir():  # a class with no images in this split
            continue
        for f in sorted((root / name).iterdir()):
            if f.is_file() and f.suffix.lower() in IMAGE_EXTS:
                files.append((f, label))
    return files


def _classes(root: Path) -> list[str]:
    return sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))


def _image_mode(first: Path) -> str:
    try:
        with Image.open(first) as im:
            return "L" if im.mode in ("L", "I", "I;16", "1", "F") else "RGB"
    except OSError as e:
        raise BadInput(f"cannot read image {first}: {e}") from None


def _as_dataset(files: list[tuple[Path, int]], size: int, mode: str) -> Dataset:
    channels = 1 if mode == "L" else 3
    if len(files) * channels * size * size * 4 > PRELOAD_LIMIT_BYTES:
        return LazyImages(files, size, mode)
    try:
        images = (
            torch.stack([_decode(p, size, mode) for p, _ in files])
            if files
            else torch.empty(0, channels, size, size)
        )
    except OSError as e:
        raise BadInput(f"cannot read an image under {files[0][0].parent.parent}: {e}") from None
    labels = torch.tensor([label for _, label in files], dtype=torch.long)
    return TensorImages(images, labels)


def image_folder(root: Path, size: int, what: str) -> DataBundle:
    """Load ``root`` as train/val class folders, or class folders with a held-out fifth."""
    if not root.is_dir():
        raise BadInput(f"dataset folder {root} does not exist: {what}")
    if (root / "train").is_dir():
        classes = _classes(root / "train")
        train = _class_files(root / "train", classes)
        val = _class_files(root / "val", classes) if (root / "val").is_dir() else []
        if not val:  # no val folder: hold out every fifth training image per class
            train, val = _hold_out(train)
    else:
        classes = _classes(root)
        train, val = _hold_out(_class_files(root, classes))
    if len(classes) < 2 or not train:
        raise BadInput(
            f"dataset folder {root} holds no images in two or more class folders: {what}"
        )
    mode = _image_mode(train[0][0])
    return DataBundle(
        train=_as_dataset(train, size, mode),
        val=_as_dataset(val, size, mode),
        num_classes=len(classes),
        channels=1 if mode == "L" else 3,
        name=str(root),
    )


def _hold_out(files: list[tuple[Path, int]]) -> tuple[list, list]:
    train, val, seen = [], [], {}
    for f, label in files:
        nth = seen.get(label, 0)
        seen[label] = nth + 1
        (val if nth % 5 == 4 else train).append((f, label))
    return train, val


class SyntheticImages(Dataset):
    """Random images made on demand from the index (for sizes too big to hold in memory)."""

    def __init__(self, labels: torch.Tensor, templates: torch.Tensor, offset: int) -> None:
        self.labels, self.templates, self.offset = labels, templates, offset

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(self.offset + i)
        label = self.labels[i]
        return torch.randn(self.templates.shape[1:], generator=gen) + 0.5 * self.templates[
            label
        ], label


def synthetic(size: int) -> DataBundle:
    """Deterministic random images (the same for every seed) with a class template added."""
    gen = torch.Generator().manual_seed(1234)
    templates = torch.randn(SYNTHETIC_CLASSES, 3, size, size, generator=gen)
    lazy = (SYNTHETIC_TRAIN + SYNTHETIC_VAL) * 3 * size * size * 4 > PRELOAD_LIMIT_BYTES

    def make(n: int, offset: int) -> Dataset:
        labels = torch.randint(0, SYNTHETIC_CLASSES, (n,), generator=gen)
        if lazy:  # e.g. --image-size 224: 2,560 images would be 1.5 GB as one tensor
            return SyntheticImages(labels, templates, offset)
        return TensorImages(
            torch.randn(n, 3, size, size, generator=gen) + 0.5 * templates[labels], labels
        )

    return DataBundle(
        make(SYNTHETIC_TRAIN, 10**6),
        make(SYNTHETIC_VAL, 2 * 10**6),
        SYNTHETIC_CLASSES,
        3,
        "synthetic",
    )


def load(spec: str, size: int, delay_ms: float = 0.0) -> DataBundle:
    """The ``--dataset`` spec as a ``DataBundle``; ``BadInput`` if it cannot be used.

    ``delay_ms`` (``--data-delay-ms``) makes each training batch wait that long
    (``training.debug.Delayed``)."""
    bundle = _load(spec, size)
    if delay_ms > 0:
        from training.debug import Delayed

        bundle.train = Delayed(bundle.train, delay_ms)  # type: ignore[assignment]
    return bundle


def _load(spec: str, size: int) -> DataBundle:
    if spec == "digits":
        return image_folder(
            DIGITS_DIR, size, "run scripts/make_digits.py to recreate the sample digits"
        )
    if spec == "synthetic":
        return synthetic(size)
    if spec.startswith("imagefolder:") and spec[len("imagefolder:") :].strip():
        path = Path(spec[len("imagefolder:") :]).expanduser()
        return image_folder(
            path, size, "give a folder with train/<class>/* and val/<class>/*, or <class>/*"
        )
    raise BadInput(f"unknown --dataset {spec!r}: use digits, synthetic or imagefolder:PATH")
