"""Runs the lab did not start (foreign event files)."""

from __future__ import annotations

from pathlib import Path

from lab.engine.scalars import ScalarWriter

T0 = 1_800_000_000.0


def _tb(folder: Path, points: dict[str, list[tuple[int, float, float]]]) -> None:
    """Events as a user's script writes them: torch's SummaryWriter, ``(step, seconds after T0,
    value)``."""
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(folder))
    for tag, rows in points.items():
        for step, t, v in rows:
            w.add_scalar(tag, v, global_step=step, walltime=T0 + t)
    w.close()


def _sys(folder: Path, samples: dict[str, list[float]]) -> None:
    """The supervisor's device samples: one event per second."""
    w = ScalarWriter(folder)
    for i in range(len(next(iter(samples.values())))):
        w.add({tag: vals[i] for tag, vals in samples.items()}, i, T0 + i)
    w.close()


def _foreign(root: Path) -> Path:
    """Foreign logs: a folder of someone's events with the supervisor's sys/ beside them, and no run
    files."""
    folder = root / "their-logs"
    _tb(folder / "train", {"Loss/train": [(i * 4, float(i), 1.0) for i in range(5)]})
    _sys(
        folder / "sys",
        {"sys/gpu0/util_pct": [80, 90, 85, 95], "sys/gpu0/mem_used_mib": [100, 400, 300, 200]},
    )
    return folder
