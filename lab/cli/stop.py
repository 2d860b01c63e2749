"""``python -m lab stop RUN|SWEEP [--grace S]``: SIGTERM to a run's processes, SIGKILL after the
grace period; a sweep id stops its running run and cancels the rest."""

from __future__ import annotations

import argparse

from lab.cli.common import root
from lab.runfolder import ENDED_STATES


def cmd_stop(a: argparse.Namespace) -> int:
    from lab.engine import registry
    from lab.engine.launch import launcher, sweeps

    if a.run.startswith("sweep-"):
        states = sweeps.stop_sweep(a.run, root(), a.grace)
        for rid, st in states.items():
            print(f"{rid} {st}")
        return 0
    before = registry.get_run(a.run, root()).state
    if before in ENDED_STATES:
        print(f"run {a.run} already {before}: nothing to stop")
        return 0
    print(f"{a.run} {launcher.stop(a.run, root(), a.grace)}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("stop", help="stop a run (or a sweep id)")
    p.add_argument("run")
    p.add_argument("--grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL")
    p.set_defaults(func=cmd_stop)
