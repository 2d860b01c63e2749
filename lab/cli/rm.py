"""``python -m lab rm RUN``: delete a finished run's folder (refused while it runs)."""

from __future__ import annotations

import argparse

from lab.cli.common import root


def cmd_rm(a: argparse.Namespace) -> int:
    from lab.engine import registry

    registry.delete_run(a.run, root())
    print(f"removed {a.run}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("rm", help="delete a finished run")
    p.add_argument("run")
    p.set_defaults(func=cmd_rm)
