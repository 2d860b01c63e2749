"""``python -m lab status [RUN|SWEEP] [--json]``: every run (newest first, a sweep's runs together
under its id, in the order they ran), one run, or one sweep's runs; each with its state, step,
health findings and why it ended."""

from __future__ import annotations

import argparse

from lab.cli.common import print_json, root
from lab.engine.spec import sweep as sweep_record


def _status_line(r, width: int = 48) -> str:
    d = r.diagnosis or {}
    why = f"  {d.get('cause')}" if d.get("cause") else ""
    if r.unreadable:  # the damaged run files, named
        why = f"  {', '.join(r.unreadable)} empty, truncated or not JSON" + why
    if r.slurm and not why:  # a Slurm run: its job, Slurm's state and why it waits
        s = r.slurm
        why = f"  slurm job {s.get('job_id')} {s.get('state')}" + (
            f" ({s['reason']})" if s.get("reason") else ""
        )
    prog = r.progress or {}
    total = f"/{prog['total_steps']}" if prog.get("total_steps") else ""
    step = f" step {prog.get('step')}{total}" if prog.get("step") is not None else ""
    health = "".join(f" [{f.get('key')}]" for f in r.health)  # the findings' keys, e.g. [stalled]
    return f"{r.run_id:{width}} {r.state:10} {r.mode or '-':6}{step}{health}{why}"


def cmd_status(a: argparse.Namespace) -> int:
    from lab.engine import registry

    # the registry's record, and the supervisor's interference, train_processes and queue records
    # from status.json
    def js(rec) -> dict:
        st = registry.status_record(rec.run_dir)  # watcher: {"pid", "adopted_at"} once adopted
        return dict(
            rec.to_json(),
            interference=st.interference,
            train_processes=st.train_processes,
            queue=st.queue,
            watcher=st.watcher,
        )

    if a.run and a.run.startswith("sweep-"):
        ids = sweep_record.read(root(), a.run).get("run_ids")
        if ids is None:
            raise registry.RunNotFound(f"no sweep {a.run!r} in {root()}: `status` lists them")
        place = {rid: i for i, rid in enumerate(ids)}  # a sweep of 1,000 runs: no n² lookups
        recs = sorted(
            (r for r in registry.list_runs(root()) if r.run_id in place),
            key=lambda r: place[r.run_id],
        )
        gone = len(ids) - len(recs)
        if a.json:
            print_json({"sweep_id": a.run, "run_ids": ids, "runs": [js(r) for r in recs]})
        else:
            print("\n".join(grouped(recs, {a.run: ids})))
            if gone:
                print(f"({gone} of its runs removed)")
        return 0
    if a.run:
        rec = registry.get_run(a.run, root())
        if a.json:
            print_json(js(rec))
            return 0
        fix = (rec.diagnosis or {}).get("fix")
        print(_status_line(rec) + (f"\n  fix: {fix}" if fix else ""))  # what to do, not only why
        return 0
    recs = registry.list_runs(root())
    if a.json:
        print_json([js(r) for r in recs])
    elif not recs:
        print(f"no runs in {root()} (LAB_RUNS_DIR names another folder)")
    else:
        orders = {s: sweep_record.read(root(), s).get("run_ids") or [] for s in _sweeps(recs)}
        print("\n".join(grouped(recs, orders)))
    return 0


def _sweeps(recs) -> list[str]:
    return sorted({r.sweep_id for r in recs if r.sweep_id})


def grouped(recs, orders: dict[str, list[str]]) -> list[str]:
    """Status lines, newest first, a sweep's runs together under a line with its id, in the order
    the sweep ran them (``orders``: sweep id -> run ids); columns aligned on the longest id."""
    width = max(len(r.run_id) for r in recs) + 2 if recs else 48
    by_sweep: dict[str, list] = {}
    for r in recs:
        if r.sweep_id:
            by_sweep.setdefault(r.sweep_id, []).append(r)
    lines, shown = [], set()
    for r in recs:
        if not r.sweep_id:
            lines.append(_status_line(r, width))
        elif r.sweep_id not in shown:
            shown.add(r.sweep_id)
            place = {rid: k for k, rid in enumerate(orders.get(r.sweep_id) or [])}
            runs = sorted(
                by_sweep[r.sweep_id],
                key=lambda x: (place.get(x.run_id, len(place)), x.created_at or ""),
            )
            lines.append(f"{r.sweep_id} ({len(runs)} runs)")
            lines += ["  " + _status_line(x, width - 2) for x in runs]
    return lines


def add_parser(sub) -> None:
    p = sub.add_parser("status", help="runs and their states")
    p.add_argument("run", nargs="?", help="a run id or a sweep id (default: every run)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)
