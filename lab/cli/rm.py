"""``python -m lab rm RUN|SWEEP``: delete a finished run's folder, or every run of a finished sweep
and its record (refused, with nothing removed, while any of them runs)."""

from __future__ import annotations

import argparse
import shutil

from lab.cli.common import root
from lab.engine.spec import sweep as sweep_record


def cmd_rm(a: argparse.Namespace) -> int:
    from lab.engine import registry

    if not a.run.startswith("sweep-"):
        registry.delete_run(a.run, root())
        print(f"removed {a.run}")
        return 0
    ids = sweep_record.read(root(), a.run).get("run_ids")
    if ids is None:
        raise registry.RunNotFound(f"no sweep {a.run!r} in {root()}: see `status` for sweep ids")
    present = [rid for rid in ids if (root() / rid).is_dir()]
    records = [registry.removable(rid, root()) for rid in present]  # all checked before any goes
    for rec in records:
        shutil.rmtree(rec.run_dir)
    for suffix in (".json", ".log"):
        sweep_record.path(root(), a.run, suffix).unlink(missing_ok=True)
    print(f"removed {a.run} and its {len(records)} runs")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("rm", help="delete a finished run, or a finished sweep and all its runs")
    p.add_argument("run", help="a run id, or a sweep id (every run of it must have ended)")
    p.set_defaults(func=cmd_rm)
