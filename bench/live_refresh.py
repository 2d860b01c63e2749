"""A run that logs for days must not slow the Live page: one refresh of the Live page's charts at
1,000 points per tag against the same at 1,000,000, side by side in one process.

A refresh is what the Live page's fragment does every few seconds: the shared incremental reader
reads what was appended since the last refresh (here 10 new steps), ``run_scalars`` hands the
series over, ``train_charts`` picks the curves and ``spec_figure`` builds each figure (downsampled
to ``charts.DEFAULT_MAX_POINTS`` per trace). Two run folders are written once (SummaryWriter's
exact bytes, ``bench/events_read.py``'s writer), with four trainer tags; the two sizes take turns,
``--repeats`` times, and the medians, spreads and their ratio are printed.

    python bench/live_refresh.py [--big 1000000] [--small 1000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.events_read import fast_records  # noqa: E402
from lab import tags  # noqa: E402
from lab.events import LogdirReader  # noqa: E402
from lab.views import charts  # noqa: E402
from lab.views.live import run_charts  # noqa: E402
from lab.views.runscalars import run_scalars, split_sys  # noqa: E402

TAGS = [tags.TRAIN_LOSS, tags.TRAIN_ACC, tags.SAMPLES_PER_SEC, tags.GRAD_NORM]
NEW_STEPS = 10  # appended before each refresh: a few seconds of a fast run


class Run:
    """A run folder whose tb/ event file grows by ``NEW_STEPS`` steps before each refresh."""

    def __init__(self, root: Path, points: int) -> None:
        self.dir = root / f"run-{points}"
        self.file = self.dir / "tb" / "events.out.tfevents.1764000000.bench.0.0"
        self.file.parent.mkdir(parents=True)
        with open(self.file, "wb") as f:
            for chunk in _chunks(0, points):
                f.write(chunk)
        self.steps = points
        self.reader = LogdirReader(str(self.dir), cache=False)
        run_scalars(self.reader)  # the page's first draw: every point read once

    def grow(self) -> None:
        with open(self.file, "ab") as f:
            f.write(b"".join(fast_records(self.steps, NEW_STEPS, names=TAGS)))
        self.steps += NEW_STEPS

    def refresh(self) -> int:
        """One Live refresh; the points drawn."""
        tb, _sys = split_sys(run_scalars(self.reader))
        specs = run_charts.train_charts(tb)
        figures = [charts.spec_figure(s) for s in specs]
        return sum(len(t.x) for fig in figures for t in fig.data if t.x is not None)


def _chunks(first: int, steps: int, size: int = 50_000):
    for start in range(first, first + steps, size):
        yield b"".join(fast_records(start, min(size, first + steps - start), names=TAGS))


def measure(run: Run) -> tuple[float, int]:
    run.grow()
    t = time.perf_counter()
    drawn = run.refresh()
    return time.perf_counter() - t, drawn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--big", type=int, default=1_000_000, help="points per tag of the long run")
    ap.add_argument("--small", type=int, default=1_000, help="points per tag of the short run")
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="lab-live-bench-") as tmp:
        t = time.perf_counter()
        small, big = Run(Path(tmp), a.small), Run(Path(tmp), a.big)
        print(f"wrote and first read both runs in {time.perf_counter() - t:.1f} s", flush=True)
        times: dict[str, list[float]] = {"small": [], "big": []}
        drawn: dict[str, int] = {}
        for _ in range(a.repeats):  # the two sizes take turns
            for name, run in (("small", small), ("big", big)):
                s, drawn[name] = measure(run)
                times[name].append(s)
        for name, run in (("small", small), ("big", big)):
            ts = times[name]
            print(
                f"{run.steps:>9} points per tag: refresh median "
                f"{statistics.median(ts) * 1e3:.1f} ms (min {min(ts) * 1e3:.1f}, "
                f"max {max(ts) * 1e3:.1f}), {drawn[name]} points drawn"
            )
        ratio = statistics.median(times["big"]) / statistics.median(times["small"])
        print(f"ratio big/small: {ratio:.2f} (1.00: the refresh does not grow with the run)")


if __name__ == "__main__":
    main()
