"""``python -m lab status [RUN] [--json]``: every run (newest first) or one, with its state, step,
health findings and why it ended."""

from __future__ import annotations

import argparse

from lab.cli.common import print_json, root


def _status_line(r) -> str:
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
    step = (
        f" step {prog.get('step')}/{prog.get('total_steps')}"
        if prog.get("step") is not None
        else ""
    )
    health = "".join(f" [{f.get('key')}]" for f in r.health)  # the findings' keys, e.g. [stalled]
    return f"{r.run_id:48} {r.state:10} {r.mode or '-':6}{step}{health}{why}"


def cmd_status(a: argparse.Namespace) -> int:
    from lab.engine import registry

    # the registry's record, and the supervisor's interference, train_processes and queue records
    # from status.json
    def js(rec) -> dict:
        st = registry.status(rec.run_dir)  # watcher: {"pid", "adopted_at"} after an adoption
        return dict(
            rec.to_json(),
            interference=st.get("interference"),
            train_processes=st.get("train_processes"),
            queue=st.get("queue"),
            watcher=st.get("watcher"),
        )

    if a.run:
        rec = registry.get_run(a.run, root())
        print_json(js(rec)) if a.json else print(_status_line(rec))
        return 0
    recs = registry.list_runs(root())
    if a.json:
        print_json([js(r) for r in recs])
    else:
        print("\n".join(map(_status_line, recs)) if recs else f"no runs in {root()}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("status", help="runs and their states")
    p.add_argument("run", nargs="?")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)
