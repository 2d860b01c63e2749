"""Export scikit-learn's bundled 8x8 digits into ``sample_data/digits`` as PNGs.

Run once by hand (``python scripts/make_digits.py``); the output is committed,
so scikit-learn is neither a runtime nor a test dependency. The layout is an
ImageFolder: ``train/<class>/<index>.png`` and ``val/<class>/<index>.png``,
grayscale, pixel values 0..16 scaled to 0..255. The split is stratified and
deterministic: within each class, every fifth image (in dataset order) goes to
``val`` (20 %), the rest to ``train``.
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
from PIL import Image

OUT = Path(__file__).resolve().parent.parent / "sample_data" / "digits"


def export(out: Path) -> dict[str, int]:
    """Write the PNGs under ``out``; return the image count per split."""
    from sklearn.datasets import load_digits  # only needed when regenerating

    digits = load_digits()
    counts = {"train": 0, "val": 0}
    for split in counts:
        if (out / split).exists():
            shutil.rmtree(out / split)  # regenerate from scratch: no stale files
    seen_per_class: dict[int, int] = {}
    for index, (image, label) in enumerate(zip(digits.images, digits.target)):
        label = int(label)
        nth = seen_per_class.get(label, 0)
        seen_per_class[label] = nth + 1
        split = "val" if nth % 5 == 4 else "train"
        folder = out / split / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        pixels = np.clip(np.rint(image * (255.0 / 16.0)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels, mode="L").save(folder / f"{index:04d}.png", optimize=True)
        counts[split] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    counts = export(args.out)
    print(f"wrote {counts['train']} train and {counts['val']} val images under {args.out}")


if __name__ == "__main__":
    main()
