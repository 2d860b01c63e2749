"""``python -m lab launch``: start a run in the background (the trainer, or a script of your own
with ``--script``), or with ``--dry-run`` print what the Launch page shows before a launch."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from lab.cli import run_options, script_options
from lab.cli.common import UserError, next_commands, print_json, root, snapshot
from lab.engine.spec.run import RunConfig


def _show_command(cfg: RunConfig, usable: tuple[int, ...], as_json: bool) -> int:
    """``launch --dry-run``: the pre-flight lines and the command, as the Launch page shows them."""
    from lab.engine.launch import request
    from lab.engine.launch.config import validate
    from lab.engine.preflight.checks import machine_facts
    from lab.views.text import shell_line

    snap = snapshot()
    validate(cfg, usable, machine_facts(cfg, snap.gpus))  # what launch refuses, refused here too
    p = request.preview(cfg, snap, root())
    if as_json:
        print_json(dataclasses.asdict(p))
        return 0
    for line in p.preflight:
        print(f"# {line}")
    if p.sbatch:  # a Slurm run: the job script, then the command that submits it
        print(f"# {p.argv[-1]}:\n{p.sbatch}", end="")
    print(shell_line(p.argv, p.env, cwd=p.cwd))
    for i, other in enumerate(p.other_nodes, start=1):
        print(f"# on node {i} (same repository; the command sets the GPU environment):")
        print(shell_line(other, cwd=p.cwd))
    return 0


def cmd_launch(a: argparse.Namespace) -> int:
    from lab.engine import registry
    from lab.engine.devices import nvml as devices
    from lab.engine.launch import launcher

    # the indices NVML can read, not its count: one may refuse to open
    usable = devices.usable_indices()
    if script_options.wanted(a):
        return script_options.launch(a, root(), usable)
    if a.script_args:
        raise UserError(
            "arguments after -- go to a script of your own: give --script PATH (or --module NAME)"
        )
    cfg = run_options.run_config(a, a.mode, usable)
    if a.dry_run:
        return _show_command(cfg, usable, a.json)
    run_id = launcher.launch(cfg, root(), exclusive=a.exclusive, wait_for_idle=a.wait_for_idle)
    rec = registry.get_run(run_id, root())
    if a.json:
        print_json({"run_id": run_id, "state": rec.state, "run_dir": rec.run_dir, "mode": cfg.mode})
    else:
        print(f"{run_id} {rec.state} {rec.run_dir}")
        print(next_commands(run_id), file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "launch", help="start a run in the background (the trainer, or --script of your own)"
    )
    run_options.add_run_options(p)
    p.add_argument(
        "--dry-run", action="store_true", help="only print the pre-flight check and the command"
    )
    p.add_argument(
        "--exclusive",
        action="store_true",
        help="start only when no other lab run runs, and let none start beside it (the queue)",
    )
    p.add_argument(
        "--wait-for-idle",
        action="store_true",
        help="once its turn comes, wait until its GPUs hold no other process and others use "
        "under 20%% of every core, three readings in a row (the wait and why: status --json)",
    )
    script_options.add_options(p)
    p.set_defaults(func=cmd_launch)
