"""``python -m lab logs RUN [--follow] [--rank N] [-n LINES]``: a run's combined output, or one
local rank's."""

from __future__ import annotations

import argparse

from lab.cli.common import UserError, root


def cmd_logs(a: argparse.Namespace) -> int:
    from lab.engine import logs, registry

    rec = registry.get_run(a.run, root())
    if a.rank is not None and a.rank not in logs.ranks(rec.run_dir):
        have = logs.ranks(rec.run_dir)
        raise UserError(
            f"run {a.run} has no rank {a.rank}: "
            + (f"use one of {have}" if have else "it has no per-rank logs; leave out --rank")
        )
    if a.follow:
        for ln in logs.follow(rec.run_dir, a.rank):
            print(ln, flush=True)
    else:
        text = logs.tail(rec.run_dir, a.lines, a.rank)
        if text:
            print(text)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("logs", help="a run's output")
    p.add_argument("run")
    p.add_argument("--follow", "-f", action="store_true")
    p.add_argument("--rank", type=int)
    p.add_argument("--lines", "-n", type=int, default=200)
    p.set_defaults(func=cmd_logs)
