"""``python -m lab scalars LOGDIR``: every scalar below a folder, as CSV or JSON.

Owns the ``scalars`` subcommand: ``add_parser(subparsers)`` registers it
(``lab.cli.scalars`` registers it), ``run(args)`` does it, ``main()`` runs it alone
(``python -m lab.events.export``). One row per point, columns
``run, tag, step, wall_time, value``, runs and tags in sorted order and each
series as ``lab.events`` orders it. Floats are written with Python's repr,
so they read back exactly; in JSON a non-finite value is ``null``. Reader
warnings go to stderr as ``warning:`` lines; bad input is one ``error:``
line and exit code 2.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
from typing import Iterator

COLUMNS = ("run", "tag", "step", "wall_time", "value")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "scalars",
        help="print every scalar of every run below a folder",
        description="Print every scalar point of every TensorBoard run below LOGDIR "
        "(columns run, tag, step, wall_time, value).",
    )
    _add_arguments(p)
    p.set_defaults(func=run)
    return p


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("logdir", help="a folder searched recursively for events.out.tfevents.* files")
    p.add_argument(
        "--tags", metavar="REGEX", help="only tags matching this regular expression (re.search)"
    )
    p.add_argument("--format", choices=("csv", "json"), default="csv", help="default: csv")


def _rows(reader, pattern: re.Pattern | None) -> Iterator[tuple]:
    for name in reader.run_names():
        for tag, s in reader.scalars(name).items():
            if pattern is None or pattern.search(tag):
                for step, wall, value in zip(
                    s.step.tolist(), s.wall_time.tolist(), s.value.tolist()
                ):
                    yield name, tag, step, wall, value


def run(args: argparse.Namespace) -> int:
    from lab.events import LogdirReader

    logdir = args.logdir
    if not os.path.exists(logdir):
        return _error(f"{logdir} does not exist: give the folder your writer logged to")
    if not os.path.isdir(logdir):
        return _error(f"{logdir} is a file: give the folder that holds the event files")
    try:
        pattern = re.compile(args.tags) if args.tags else None
    except re.error as e:
        return _error(
            f"--tags {args.tags!r} is not a regular expression ({e}); try e.g. --tags 'loss|acc'"
        )
    reader = LogdirReader(logdir)
    reader.refresh()
    for w in reader.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if not reader.run_names():
        return _error(f"no TensorBoard event files (events.out.tfevents.*) under {logdir}")
    try:
        if args.format == "csv":
            w = csv.writer(sys.stdout, lineterminator="\n")
            w.writerow(COLUMNS)
            w.writerows(_rows(reader, pattern))
        else:
            _write_json(sys.stdout, _rows(reader, pattern))
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piped into head: not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 0


def _write_json(out, rows: Iterator[tuple]) -> None:
    out.write("[")
    sep = "\n"
    for run, tag, step, wall, value in rows:
        obj = {
            "run": run,
            "tag": tag,
            "step": step,
            "wall_time": wall,
            "value": value if math.isfinite(value) else None,
        }
        out.write(sep + json.dumps(obj))
        sep = ",\n"
    out.write("\n]\n")


def _error(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m lab.events.export", description=__doc__.splitlines()[0]
    )
    _add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
