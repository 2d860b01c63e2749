"""``python -m lab resume RUN [--json]``: a new run continuing a failed, stopped or lost run from
its last checkpoint (``lab.engine.launch.resume``), linked both ways."""

from __future__ import annotations

import argparse
import json

from lab.cli.common import root


def cmd_resume(a: argparse.Namespace) -> int:
    from lab.engine import registry
    from lab.engine.launch.resume import resume

    new = resume(a.run, root())
    rec = registry.get_run(new, root())
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


def add_parser(sub) -> None:
    p = sub.add_parser(
        "resume", help="a new run continuing a failed, stopped or lost run from its last checkpoint"
    )
    p.add_argument("run")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_resume)
