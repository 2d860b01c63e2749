"""``python -m lab compare RUN|SWEEP|FOLDER... [--baseline RUN] [--json]``: the Compare table as
text or JSON."""

from __future__ import annotations

import argparse

from lab.cli.common import UserError, print_json, root
from lab.views.compare.derived import STEP_RATE


def cmd_compare(a: argparse.Namespace) -> int:
    from lab.views.compare import document as compare_json

    runs = compare_json.resolve(a.runs + ([a.baseline] if a.baseline else []), root())
    base = next((r.key for r in runs if a.baseline in (r.run_id, r.key)), None)
    if a.baseline and base is None:  # a sweep id: which of its runs is meant?
        raise UserError(f"--baseline {a.baseline}: give one run id, e.g. {runs[0].run_id}")
    scalars = compare_json.load_scalars(runs)
    problem = compare_json.tag_problem(a.throughput_tag, scalars)
    if problem:
        raise UserError(problem)
    doc = compare_json.comparison(runs, base, scalars, a.throughput_tag)
    print_json(doc) if a.json else print("\n".join(compare_json.text(doc, runs)))
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compare", help="the Compare table: speedups with intervals, noise, busy machines"
    )
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="run ids, sweep ids (all their runs), or folders (with a /): a run folder, or foreign "
        "TensorBoard logs",
    )
    p.add_argument(
        "--baseline", help="the run whose throughput is speedup 1 (default: a single-device run)"
    )
    p.add_argument(
        "--throughput-tag",
        metavar="TAG",
        help="the throughput of runs without summary.json (your scripts): a tag they log "
        "(default: the "
        f"first matching samples_per_sec|throughput|img/s|it/s), or '{STEP_RATE}' for steps/s of "
        "the loss tag; their figures are marked derived",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_compare)
