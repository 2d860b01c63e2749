"""Line coverage of each package of the lab, from the data the test run left in ``.coverage``.

    python scripts/coverage_by_package.py [--data .coverage]

Prints one line per package (statements, missed, percent, floor) and exits 1 when a package is
below its floor. ``scripts/test.sh`` runs the suite under coverage (subprocesses included: the
supervisor, the trainer and torchrun's ranks are measured where they run) and then this.
The floors sit a few points under what a full run measured; a package that loses its tests
falls through its floor.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import coverage

REPO = Path(__file__).resolve().parent.parent

# package (a folder, relative to the repository) -> the least line coverage it may have, in %
FLOORS = {
    "lab": 88,
    "lab/cli": 87,
    "lab/engine": 84,
    "lab/engine/devices": 90,
    "lab/engine/health": 86,
    "lab/engine/launch": 90,
    "lab/engine/preflight": 90,
    "lab/engine/queue": 88,
    "lab/engine/slurm": 85,
    "lab/engine/supervise": 89,
    "lab/engine/sweep": 85,
    "lab/engine/noise": 90,
    "lab/events": 87,
    "lab/views": 91,
    "lab/views/compare": 92,
    "lab/views/live": 91,
    "lab/views/logs": 92,
    "training": 85,
    "ui": 90,
}


def by_package(data_file: Path) -> dict[str, tuple[int, int]]:
    """package folder -> (statements, missed), each file counted in its own folder only."""
    cov = coverage.Coverage(data_file=str(data_file))
    cov.load()
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for name in sorted(cov.get_data().measured_files()):
        path = Path(name).resolve()
        try:
            folder = path.parent.relative_to(REPO).as_posix()
        except ValueError:
            continue
        _, statements, _, missing, _ = cov.analysis2(str(path))
        out[folder][0] += len(statements)
        out[folder][1] += len(missing)
    return {k: (v[0], v[1]) for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO / ".coverage")
    args = ap.parse_args(argv)
    if not args.data.is_file():
        print(f"error: no coverage data at {args.data}: run the suite with --cov first")
        return 2
    found = by_package(args.data)
    below = []
    print(f"{'package':24} {'statements':>10} {'missed':>7} {'cover':>6} {'floor':>6}")
    for package in sorted(set(FLOORS) | set(found)):
        statements, missed = found.get(package, (0, 0))
        pct = 100.0 * (statements - missed) / statements if statements else 0.0
        floor = FLOORS.get(package)
        mark = "" if floor is None or pct >= floor else "  below the floor"
        floor_text = "-" if floor is None else f"{floor}%"
        print(f"{package:24} {statements:10} {missed:7} {pct:5.1f}% {floor_text:>6}{mark}")
        if mark:
            below.append(package)
    if below:
        print(f"coverage below the floor in: {', '.join(below)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
