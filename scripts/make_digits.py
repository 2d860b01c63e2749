"""Export the UCI 8x8 digits into ``sample_data/digits`` as PNGs.

Run once by hand (``python scripts/make_digits.py --source FILE``); the output
is committed, so the source file is needed only to regenerate. FILE is the
UCI ``optdigits.tes`` or scikit-learn's bundled copy of it,
``sklearn/datasets/data/digits.csv.gz``: one image a line, 64 pixel counts
(0..16, row-major) then the label, comma-separated, optionally gzipped. It is
read with numpy alone, so scikit-learn is no dependency of this project. The layout is an
ImageFolder: ``train/<class>/<index>.png`` and ``val/<class>/<index>.png``,
grayscale, pixel values 0..16 scaled to 0..255. The split is stratified and
deterministic: within each class, every fifth image (in dataset order) goes to
``val`` (20 %), the rest to ``train``.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
from pathlib import Path

import numpy as np
from PIL import Image

OUT = Path(__file__).resolve().parent.parent / "sample_data" / "digits"


def load(source: Path) -> tuple[np.ndarray, np.ndarray]:
    """(images N x 8 x 8, labels N) from the comma-separated source file."""
    opener = gzip.open if source.suffix == ".gz" else open
    with opener(source, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.int64)
    if rows.ndim != 2 or rows.shape[1] != 65:
        raise SystemExit(
            f"error: {source} is not 65 comma-separated integers a line (64 pixels + label)"
        )
    return rows[:, :64].reshape(-1, 8, 8).astype(np.float64), rows[:, 64]


def export(source: Path, out: Path) -> dict[str, int]:
    """Write the PNGs under ``out``; return the image count per split."""
    images, targets = load(source)
    counts = {"train": 0, "val": 0}
    for split in counts:
        if (out / split).exists():
            shutil.rmtree(out / split)  # regenerate from scratch: no stale files
    seen_per_class: dict[int, int] = {}
    for index, (image, label) in enumerate(zip(images, targets)):
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
    parser.add_argument(
        "--source",
        type=Path,
        required=True,
        help="optdigits.tes, or sklearn/datasets/data/digits.csv.gz",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    counts = export(args.source, args.out)
    print(f"wrote {counts['train']} train and {counts['val']} val images under {args.out}")


if __name__ == "__main__":
    main()
