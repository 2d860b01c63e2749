"""Which test modules' processes are worth measuring: what coverage of the processes tests start
adds, module by module, beyond the tests' own process and the other modules.

    python scripts/coverage_of_processes.py [--out DIR] [--reuse] [--min-lines 9]

Runs the quick tier and the process tiers (not the serial pass) under coverage, as
``scripts/test.sh`` does, but with every module's processes measured into a folder of its own
(``LAB_COVERAGE_BY_MODULE``: tests/conftest.py). It then picks modules greedily, each time the one
whose processes add the most lines that nothing picked yet reaches, and stops when none adds
``--min-lines``. It prints each pick (lines, processes), and each package's line coverage in three
cases: every process measured, only ``tests/helpers/measured.py``'s modules, and only the picks,
against its floor. About 16 minutes here; ``--reuse`` analyses an earlier ``--out`` again.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import coverage
from coverage import CoverageData

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from scripts.coverage_by_package import FLOORS  # noqa: E402
from tests.helpers.measured import MEASURED_PROCESSES  # noqa: E402

QUICK = "not proc and not e2e and not slurm and not gpu"
PROCESSES = "(proc or e2e or slurm or gpu) and not serial"
Lines = set[tuple[str, int]]


def measure(out: Path) -> None:
    """The two passes; each leaves its own process's data as a file in ``out``."""
    shutil.rmtree(out, ignore_errors=True)
    (out / "modules").mkdir(parents=True)
    py = [sys.executable, "-m", "pytest", "--cov", "--cov-report=", "-n", "2", "-q"]
    by_module = {"LAB_COVERAGE_BY_MODULE": str(out / "modules")}
    for name, argv, env in (
        ("quick", ["-m", QUICK], {}),
        ("processes", ["--dist", "loadgroup", "-m", PROCESSES], by_module),
    ):
        subprocess.run(py + argv, cwd=REPO, env={**os.environ, **env}, check=True)
        shutil.move(REPO / ".coverage", out / name)


def lines_of(files: list[Path]) -> Lines:
    out: Lines = set()
    for f in files:
        data = CoverageData(basename=str(f))
        try:
            data.read()
            measured = data.measured_files()
        except coverage.CoverageException as e:
            # a process killed while it saved (a stop's SIGKILL): coverage's own combine skips such
            # a file with a warning, and so does this count
            print(f"skipped, not readable: {f} ({e})", file=sys.stderr)
            continue
        for name in measured:
            out.update((name, n) for n in data.lines(name) or ())
    return out


def packages(covered: Lines, statements: dict[str, set[int]]) -> dict[str, float]:
    """Package folder -> line coverage in %, each file counted in its own folder only."""
    agg: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    by_file: dict[str, set[int]] = defaultdict(set)
    for name, n in covered:
        by_file[name].add(n)
    for name, lines in statements.items():
        folder = Path(name).parent.relative_to(REPO).as_posix()
        agg[folder][0] += len(lines)
        agg[folder][1] += len(by_file[name] & lines)
    return {k: 100.0 * c / n for k, (n, c) in agg.items() if n}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/coverage-of-processes"))
    ap.add_argument("--reuse", action="store_true", help="analyse an earlier --out again")
    ap.add_argument("--min-lines", type=int, default=9)
    args = ap.parse_args(argv)
    if not args.reuse:
        measure(args.out)
    own = lines_of([args.out / "quick", args.out / "processes"])
    modules = {
        d.name: sorted(d.glob(".coverage.*")) for d in sorted((args.out / "modules").iterdir())
    }
    cost = {m: len(fs) for m, fs in modules.items() if fs}
    lines = {m: lines_of(modules[m]) for m in cost}
    every = own.union(*lines.values())
    cov = coverage.Coverage(data_file=None, config_file=str(REPO / "pyproject.toml"))
    statements = {
        name: set(cov.analysis2(name)[1])
        for name in sorted({name for name, _ in every})
        if Path(name).is_relative_to(REPO)
    }
    print(f"lines reached: {len(own)} by the tests' own processes, {len(every)} with every process")
    picks, have = [], set(own)
    while len(picks) < len(lines):
        m = max(set(lines) - set(picks), key=lambda k: len(lines[k] - have))
        gain = len(lines[m] - have)
        if gain < args.min_lines:
            break
        picks.append(m)
        have |= lines[m]
        print(f"  {m:32} +{gain:5} lines  {cost[m]:4} processes")
    print(
        f"picked {len(picks)} of {len(lines)} modules: {sum(cost[m] for m in picks)} of "
        f"{sum(cost.values())} processes; {len(every - have)} lines left unreached"
    )
    listed = [m for m in MEASURED_PROCESSES if m in lines]
    cases = {"every": every, "measured.py": own.union(*(lines[m] for m in listed)), "picks": have}
    print(
        f"measured.py: {len(listed)} modules, {sum(cost[m] for m in listed)} processes; "
        f"{len(every - cases['measured.py'])} lines left unreached"
    )
    table = {case: packages(c, statements) for case, c in cases.items()}
    print(f"{'package':24} {'every':>7} {'measured.py':>12} {'picks':>7} {'floor':>6}")
    below = 0
    for p in sorted(FLOORS):
        row = [table[case].get(p, 0.0) for case in cases]
        below += row[1] < FLOORS[p]
        print(f"{p:24} {row[0]:6.1f}% {row[1]:11.1f}% {row[2]:6.1f}% {FLOORS[p]:5}%")
    return 1 if below else 0


if __name__ == "__main__":
    sys.exit(main())
