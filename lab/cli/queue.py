"""``python -m lab queue [--first RUN] [--json]``: this runs folder's queue (running entries, then
waiting ones in the order they will start, each with what it waits for); ``--first`` moves a
queued run (or sweep) ahead of every other waiting one."""

from __future__ import annotations

import argparse

from lab.cli.common import UserError, print_json, root


def _line(e: dict) -> str:
    where = ",".join(e["devices"]) + (" exclusive" if e.get("exclusive") else "")
    if e["state"] == "running":
        return f"running  {e['id']}  {where}"
    return f"{e['position']:>7}  {e['id']}  {where}  waiting for {', '.join(e['waiting_for'])}"


def cmd_queue(a: argparse.Namespace) -> int:
    from lab.engine.queue import book

    if a.first:
        if not book.move_first(root(), a.first):
            raise UserError(f"{a.first} is not waiting in the queue of {root()}: see `lab queue`")
    rows = book.listing(root())
    if a.json:
        print_json(rows)
    elif a.first:
        print(f"{a.first} moved to the front of the queue")
    else:
        print("\n".join(map(_line, rows)) if rows else f"the queue of {root()} is empty")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("queue", help="the runs waiting for their devices; move one to the front")
    p.add_argument("--first", metavar="RUN", help="move this queued run (or sweep) to the front")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_queue)
