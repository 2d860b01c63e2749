"""``python -m lab stacks RUN [--wait S]``: every rank's Python stack of a running run, asked of its
supervisor (the Live page's "Dump stacks now"), and where they were saved."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from lab.cli.common import root

STACKS_WAIT_S = 30.0


def cmd_stacks(a: argparse.Namespace) -> int:
    from lab.engine import registry
    from lab.engine.launch import launcher

    before = registry.status_record(registry.get_run(a.run, root()).run_dir).stacks
    run_dir = launcher.request_stacks(a.run, root())
    end = time.monotonic() + a.wait
    while time.monotonic() < end:
        got = registry.status_record(run_dir).stacks
        if got and got != before:
            for f in got.get("files") or []:
                print(Path(run_dir, f))
            for note in got.get("notes") or []:
                print(f"# not taken: {note}")
            return 0
        time.sleep(0.2)
    raise TimeoutError(
        f"run {a.run}'s supervisor did not answer within {a.wait:.0f} s: is the run still running? "
        f"(python -m lab status {a.run})"
    )


def add_parser(sub) -> None:
    p = sub.add_parser(
        "stacks", help="every rank's Python stack of a running run, saved under its stacks/"
    )
    p.add_argument("run")
    p.add_argument(
        "--wait", type=float, default=STACKS_WAIT_S, help="seconds to wait for the supervisor"
    )
    p.set_defaults(func=cmd_stacks)
