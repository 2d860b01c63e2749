"""Log folders for the Logs page's tests, its benchmark and its screenshot: real event files,
written fast.

``make_experiments(root)`` writes TensorBoard's own protos, framed by
``lab.events.tfrecord.frame``, the bytes ``SummaryWriter`` writes: 10
experiments x 30 runs (``exp3/lr0.1-bs32-s2``), each with ``train/loss``
and ``val/acc``, and (``hparams=True``) the hparams records of torch's
``add_hparams`` in a child folder of each run, as torch writes them (its
own ``hparams()`` summaries). ``make_long_runs`` writes a few runs of many
points. Not a test file: tests, bench/logs_page.py and
scripts/refresh_screenshots.py import it.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

T0 = 1_764_400_000.0
LRS = (0.1, 0.01, 0.001)
BATCHES = (32, 64)
SEEDS = range(5)
TAGS = ("train/loss", "val/acc")


def write_events(
    path: Path,
    scalars: dict[str, tuple[np.ndarray, np.ndarray]],
    t0: float = T0,
    dt: float = 0.5,
    extra: list | None = None,
) -> None:
    """One event file: the file_version record, ``extra`` summaries, then one simple_value event per
    point."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    from lab.events.tfrecord import frame

    path.parent.mkdir(parents=True, exist_ok=True)
    chunks = [frame(Event(wall_time=t0, file_version="brain.Event:2").SerializeToString())]
    for summary in extra or []:
        chunks.append(frame(Event(wall_time=t0, summary=summary).SerializeToString()))
    for tag, (steps, values) in scalars.items():
        for s, v in zip(steps.tolist(), values.tolist()):
            ev = Event(
                wall_time=t0 + s * dt,
                step=s,
                summary=Summary(value=[Summary.Value(tag=tag, simple_value=v)]),
            )
            chunks.append(frame(ev.SerializeToString()))
    path.write_bytes(b"".join(chunks))


def torch_hparams_file(
    run_dir: Path, hparams: dict, metrics: dict[str, float], child: str = "hp"
) -> Path:
    """What ``torch SummaryWriter(run_dir).add_hparams(hparams, metrics, run_name=child)``
    writes."""
    from torch.utils.tensorboard.summary import hparams as torch_hparams

    exp, ssi, sei = torch_hparams(hparams, metrics)
    path = run_dir / child / "events.out.tfevents.0.hparams"
    write_events(
        path, {k: (np.array([0]), np.array([v])) for k, v in metrics.items()}, extra=[exp, ssi, sei]
    )
    return path


def curves(points: int, lr: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps, a falling loss and a rising accuracy whose speed depends on the learning rate."""
    rng = np.random.default_rng(seed + int(lr * 1000))
    steps = np.arange(points, dtype=np.int64) * 10
    rate = {0.1: 3.0, 0.01: 1.5, 0.001: 0.5}.get(lr, 1.0)
    t = np.linspace(0, 1, points)
    loss = 2.3 * np.exp(-rate * 3 * t) + 0.05 + 0.03 * rng.standard_normal(points)
    acc = np.clip(1 - loss / 2.4 + 0.01 * rng.standard_normal(points), 0, 1)
    return steps, loss.astype(np.float32), acc.astype(np.float32)


def run_names(experiments: int = 10) -> list[str]:
    """``exp<e>/lr<lr>-bs<batch>-s<seed>``: 30 runs per experiment, sorted as the reader sorts
    them."""
    combos = list(itertools.product(LRS, BATCHES, SEEDS))
    return sorted(f"exp{e}/lr{lr}-bs{bs}-s{s}" for e in range(experiments) for lr, bs, s in combos)


def make_experiments(
    root: Path, experiments: int = 10, points: int = 100, hparams: bool = False
) -> list[str]:
    """``experiments`` x 30 runs of ``TAGS`` under ``root``; the run names."""
    names = run_names(experiments)
    for i, name in enumerate(names):
        exp, rest = name.split("/")
        lr, bs, seed = (p[2:] if p.startswith(("lr", "bs")) else p[1:] for p in rest.split("-"))
        steps, loss, acc = curves(points, float(lr), int(seed) * 100 + int(bs))
        run_dir = root / name
        write_events(
            run_dir / f"events.out.tfevents.{int(T0) + i}.gen",
            {TAGS[0]: (steps, loss), TAGS[1]: (steps, acc)},
            t0=T0 + i,
        )
        if hparams:
            torch_hparams_file(
                run_dir,
                {"lr": float(lr), "batch": int(bs), "seed": int(seed), "exp": exp},
                {"hparam/final_acc": float(acc[-1])},
            )
    return names


def make_long_runs(root: Path, runs: int = 6, points: int = 200_000) -> list[str]:
    """``runs`` runs of ``train/loss`` with ``points`` points each."""
    names = []
    for i in range(runs):
        steps, loss, _ = curves(points, LRS[i % len(LRS)], i)
        write_events(
            root / f"run{i}" / f"events.out.tfevents.{int(T0) + i}.gen",
            {"train/loss": (steps, loss)},
            dt=0.01,
        )
        names.append(f"run{i}")
    return names
