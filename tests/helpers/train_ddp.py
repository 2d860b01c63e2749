"""Real DDP trainer runs: a free port, the one torchrun command, the options both modes share, the
losses a run logged."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

SAME = [
    "--log-every",
    "1",
    "--max-steps",
    "10",
    "--image-size",
    "16",
    "--batch-size",
    "64",
    "--lr",
    "0.1",
    "--seed",
    "3",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(mode: str, log_dir: Path, *args: str, nproc: int = 2) -> list[str]:
    """``python -m torch.distributed.run`` of the trainer in ``mode`` (ddp or fsdp) on ``nproc``
    ranks, a free master port, into ``log_dir``; torchrun's own log folder beside it (without
    ``--log-dir`` torchrun makes one in /tmp and leaves it there)."""
    return [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
        "--master-port", str(free_port()), "--log-dir", f"{log_dir}.torchrun",
        "-m", "training.train", "--mode", mode,
        "--log-dir", str(log_dir), *args,
    ]  # fmt: skip


def losses(run_dir: Path) -> dict[int, float]:
    acc = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    return {e.step: e.value for e in acc.Scalars("train/loss")}
