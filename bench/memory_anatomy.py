"""Bench: the trainer's memory estimate against the measured peak on the CPU, per model.

Runs the real trainer (``python -m training.train``, one process on the CPU, synthetic data,
a few steps) for each model into a temp folder and prints summary.json's ``memory``: the estimate
(parameters + gradients + momentum + activations), the measured peak less the baseline, and their
ratio (measured / estimate), the factor README.md states and tests/test_memory_anatomy.py checks.

    python bench/memory_anatomy.py [--models tinycnn resnet18] [--batch 64] [--image-size 32]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def measure(model: str, batch: int, image_size: int, steps: int, folder: Path) -> dict:
    """summary.json's ``memory`` of one real CPU run."""
    argv = [sys.executable, "-m", "training.train", "--model", model, "--dataset", "synthetic"]
    argv += ["--max-steps", str(steps), "--batch-size", str(batch), "--log-every", "2"]
    argv += ["--image-size", str(image_size), "--workers", "0", "--checkpoint", "none"]
    argv += ["--device", "cpu", "--log-dir", str(folder)]
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    subprocess.run(argv, cwd=REPO, env=env, check=True, capture_output=True, timeout=600)
    return json.loads((folder / "summary.json").read_text())["memory"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["tinycnn", "resnet18"])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for model in a.models:
            m = measure(model, a.batch, a.image_size, a.steps, Path(tmp) / model)
            for dev, est in m["estimate_mib"].items():
                used = m["peak_mib"][dev] - m["baseline_mib"][dev]
                print(
                    f"{model:10s} {dev}: estimate {est['total']:8.1f} MiB, measured "
                    f"{used:8.1f} MiB (peak {m['peak_mib'][dev]:.0f} - baseline "
                    f"{m['baseline_mib'][dev]:.0f}), factor {m['ratio'][dev]:.2f}"
                )


if __name__ == "__main__":
    main()
