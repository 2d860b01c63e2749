"""``python -m lab compare RUN|SWEEP|FOLDER... [--baseline RUN] [--json]``: the Compare table as
text or JSON. Finds the runs a command line names (run ids, sweep ids meaning all their runs, run
folders, foreign logs) through the registry, and prints the ``Comparison`` of them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lab.cli.common import UserError, print_json, root
from lab.engine.registry import RunNotFound, get_run, list_runs
from lab.engine.spec import sweep as sweep_record
from lab.runfolder import check_run_id
from lab.views.compare import runs
from lab.views.compare.derived import STEP_RATE, throughput_options


def _sweep_run_ids(sweep_id: str, where: Path) -> list[str]:
    sweep = sweep_record.read(where, sweep_id)
    ids = list(sweep.get("run_ids") or [])
    if not ids:  # the sweep file is gone: its runs still say which sweep they were
        ids = [
            r.run_id
            for r in sorted(runs.comparable(list_runs(where)), key=lambda r: r.created_at or "")
            if r.sweep_id == sweep_id
        ]
    if not ids:
        raise RunNotFound(
            f"no sweep {sweep_id!r} in {where}: see `python -m lab status` for the run ids"
        )
    return ids


def _sweep_runs(sweep_id: str, where: Path) -> list[runs.CompareRun]:
    """A sweep's runs in its order; a run removed since is left out with a note on stderr."""
    found, gone = [], []
    for rid in _sweep_run_ids(sweep_id, where):
        try:
            found.append(runs.from_record(get_run(rid, where)))
        except RunNotFound:
            gone.append(rid)
    if gone:
        print(
            f"note: {sweep_id}: {len(gone)} of its runs removed, compared without them: "
            f"{', '.join(gone)}",
            file=sys.stderr,
        )
    if not found:
        raise RunNotFound(f"every run of {sweep_id} was removed: nothing to compare")
    return found


def _folder(name: str) -> runs.CompareRun:
    """A folder named on the command line: a lab run folder anywhere, or foreign logs."""
    folder = Path(name).expanduser().resolve()
    try:
        return runs.from_record(get_run(check_run_id(folder.name), folder.parent))
    except (RunNotFound, ValueError):
        pass
    found = runs.foreign_logs(folder)
    if found is None:
        raise RunNotFound(
            f"{name} holds no run and no event files: name a run id, a sweep id, a run folder, "
            "or a folder of TensorBoard event files"
        )
    return found


def resolve(names: Sequence[str], where: Path) -> list[runs.CompareRun]:
    """The runs named by run ids, sweep ids (a sweep: all its runs, in its order) or folders, each
    once."""
    out: list[runs.CompareRun] = []
    for name in names:
        if "/" in name or name in (".", ".."):  # a path: a run folder anywhere, or foreign logs
            found = [_folder(name)]
        else:
            found = _sweep_runs(name, where) if name.startswith("sweep-") else []
            found = found or [runs.from_record(get_run(name, where))]
        out += [r for r in found if r.key not in {o.key for o in out}]
    return out


def tag_problem(tag: str | None, scalars: Mapping[str, Mapping[str, Any]]) -> str | None:
    """Why ``--throughput-tag`` cannot be used (no chosen run logs it), naming the choices; None
    when it can."""
    offered = throughput_options(scalars)
    if tag is None or tag in offered:
        return None
    return (
        f"--throughput-tag {tag}: none of these runs logs it; choose one of "
        f"{', '.join(offered[:12])}"
        f"{' …' if len(offered) > 12 else ''} ({STEP_RATE}: steps/s of the loss tag)"
    )


def cmd_compare(a: argparse.Namespace) -> int:
    # pandas and plotly load only for this command, not for every ``python -m lab``
    from lab.events import LogdirReader
    from lab.views.compare import document, margins
    from lab.views.compare.comparison import compare

    chosen = resolve(a.runs + ([a.baseline] if a.baseline else []), root())
    base = next((r.key for r in chosen if a.baseline in (r.run_id, r.key)), None)
    if a.baseline and base is None:  # a sweep id: which of its runs is meant?
        raise UserError(f"--baseline {a.baseline}: give one run id, e.g. {chosen[0].run_id}")
    scalars = runs.read_scalars(chosen, LogdirReader)
    problem = tag_problem(a.throughput_tag, scalars)
    if problem:
        raise UserError(problem)
    c = compare(chosen, base, scalars, a.throughput_tag, margin=margins.measured(root()))
    print_json(document.to_json(c)) if a.json else print("\n".join(document.text(c)))
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="the Compare table: group speedups with intervals and their coverage, noise, busy "
        "machines",
    )
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="run ids, sweep ids (all their runs), or folders (with a /): a run folder, or foreign "
        "TensorBoard logs",
    )
    p.add_argument(
        "--baseline",
        help="a run whose group (its sweep's runs of the same mode, knob values and device count) "
        "is the baseline (default: the first value of a knob sweep, else single on the fewest "
        "devices)",
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
