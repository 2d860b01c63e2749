"""``python -m lab resume RUN`` and ``python -m lab stacks RUN``: starting again, and every rank's
stack now.

``resume`` launches a new run continuing a failed, stopped or lost one from
its last checkpoint (``lab.engine.launch.resume``) and prints the new run's id (or
JSON with ``resumed_from``). ``stacks`` asks the run's supervisor for every
rank's Python stack (``launcher.request_stacks``), waits for them and prints
where they were saved, with what could not be taken and why. Refusals are
one line and exit 2, as everywhere in ``lab.cli``. Tested by
tests/test_health_runs.py and tests/test_resume.py.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from lab.runfolder import runs_dir

STACKS_WAIT_S = 30.0


def cmd_resume(a: argparse.Namespace) -> int:
    from lab.engine import registry
    from lab.engine.launch.resume import resume

    new = resume(a.run, runs_dir())
    rec = registry.get_run(new, runs_dir())
    if a.json:
        print(
            json.dumps(
                {"run_id": new, "state": rec.state, "run_dir": rec.run_dir, "resumed_from": a.run},
                indent=1,
            )
        )
    else:
        print(f"{new} {rec.state} {rec.run_dir} (resumed from {a.run})")
    return 0


def cmd_stacks(a: argparse.Namespace) -> int:
    from lab.engine import registry
    from lab.engine.launch import launcher

    before = registry.status(registry.get_run(a.run, runs_dir()).run_dir).get("stacks")
    run_dir = launcher.request_stacks(a.run, runs_dir())
    end = time.monotonic() + a.wait
    while time.monotonic() < end:
        got = registry.status(run_dir).get("stacks")
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


def add_parsers(sub) -> None:
    """The two subcommands, on ``python -m lab``'s subparsers."""
    p = sub.add_parser(
        "resume", help="a new run continuing a failed, stopped or lost run from its last checkpoint"
    )
    p.add_argument("run")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_resume)
    p = sub.add_parser(
        "stacks", help="every rank's Python stack of a running run, saved under its stacks/"
    )
    p.add_argument("run")
    p.add_argument(
        "--wait", type=float, default=STACKS_WAIT_S, help="seconds to wait for the supervisor"
    )
    p.set_defaults(func=cmd_stacks)
