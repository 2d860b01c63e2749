"""The command line: ``python -m lab
launch|sweep|status|stop|resume|stacks|logs|gpus|rm|compare|scalars``.

Thin argparse wrappers over ``lab.engine.launch.launcher``, ``lab.engine.registry``,
``lab.engine.logs`` and ``lab.engine.devices.nvml``; the run options are made from ``RunConfig``'s
fields and defaults (``lab.engine.launch.config``) and read into a config by
``lab.engine.launch.request.run_config``, as the Launch page's form is; ``compare`` prints
``lab.views.compare.document``'s document, the ``scalars`` subcommand is ``lab.events.export``'s,
``launch --script`` (a user's own script) ``lab.cli_script``'s, ``resume`` and ``stacks``
``lab.cli_health``'s. Runs live in ./runs unless ``LAB_RUNS_DIR`` says otherwise. Any error is one
line on stderr and exit code 2, never a traceback. The JSON keys are documented in the README.
Tested by tests/test_engine_cli.py."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import Any

from lab import cli_health, cli_options, cli_script
from lab.engine.launch.config import MODES, RunConfig
from lab.engine.sweep.plan import STRONG, compare_modes_configs, interleaved, scaled
from lab.events import export as scalars_cli
from lab.runfolder import ENDED_STATES, runs_dir


class UserError(Exception):
    """Bad input from the command line: printed as one line, exit 2."""


def _root() -> Path:
    return runs_dir()


def _print(obj: Any) -> None:
    print(json.dumps(obj, indent=1, default=str))


def _snapshot():
    from lab.engine import registry
    from lab.engine.devices import nvml as devices

    return devices.snapshot(registry.process_owner(_root()), registry.gpu_users(_root()))


def _show_command(cfg: RunConfig, usable: tuple[int, ...], as_json: bool) -> int:
    """``launch --dry-run``: the pre-flight lines and the command, as the Launch page shows them."""
    from lab.engine.launch import request
    from lab.engine.launch.config import validate
    from lab.engine.preflight.checks import machine_facts
    from lab.views.text import shell_line

    snap = _snapshot()
    validate(cfg, usable, machine_facts(cfg, snap.gpus))  # what launch refuses, refused here too
    p = request.preview(cfg, snap, _root())
    if as_json:
        _print(dataclasses.asdict(p))
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
    if cli_script.wanted(a):
        return cli_script.launch(a, _root(), usable)
    if a.script_args:
        raise UserError(
            "arguments after -- go to a script of your own: give --script PATH (or --module NAME)"
        )
    cfg = cli_options.run_config(a, a.mode, usable)
    if a.dry_run:
        return _show_command(cfg, usable, a.json)
    run_id = launcher.launch(cfg, _root())
    rec = registry.get_run(run_id, _root())
    if a.json:
        _print({"run_id": run_id, "state": rec.state, "run_dir": rec.run_dir, "mode": cfg.mode})
    else:
        print(f"{run_id} {rec.state} {rec.run_dir}")
    return 0


def cmd_sweep(a: argparse.Namespace) -> int:
    from lab.engine.devices import nvml as devices
    from lab.engine.launch import launcher

    n = devices.usable_indices()
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise UserError(f"--modes {a.modes!r}: use a comma list of {', '.join(MODES)}")
    by_mode = {
        c.mode: c
        for c in compare_modes_configs(cli_options.run_config(a, "single", n), n, a.scaling)
    }
    configs = []
    for m in modes:
        c = by_mode[m]
        # the user chose devices: keep them for every mode
        if a.gpus is not None or a.nproc is not None:
            c = scaled(cli_options.run_config(a, m, n), a.scaling)
        configs.append(c)
    sweep_id, run_ids = launcher.launch_sweep(
        interleaved(configs, a.repeats), _root(), scaling=a.scaling
    )
    if a.json:
        _print({"sweep_id": sweep_id, "run_ids": run_ids, "runs_dir": str(_root())})
    else:
        print(sweep_id)
        for r in run_ids:
            print(f"  {r}")
    return 0


def _status_line(r) -> str:
    d = r.diagnosis or {}
    why = f"  {d.get('cause')}" if d.get("cause") else ""
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

    # the registry's record, and the supervisor's interference record from status.json
    def js(rec) -> dict:
        return dict(rec.to_json(), interference=registry.status(rec.run_dir).get("interference"))

    if a.run:
        rec = registry.get_run(a.run, _root())
        _print(js(rec)) if a.json else print(_status_line(rec))
        return 0
    recs = registry.list_runs(_root())
    if a.json:
        _print([js(r) for r in recs])
    else:
        print("\n".join(map(_status_line, recs)) if recs else f"no runs in {_root()}")
    return 0


def cmd_stop(a: argparse.Namespace) -> int:
    from lab.engine import registry
    from lab.engine.launch import launcher

    if a.run.startswith("sweep-"):
        states = launcher.stop_sweep(a.run, _root(), a.grace)
        for rid, st in states.items():
            print(f"{rid} {st}")
        return 0
    before = registry.get_run(a.run, _root()).state
    if before in ENDED_STATES:
        print(f"run {a.run} already {before}: nothing to stop")
        return 0
    print(f"{a.run} {launcher.stop(a.run, _root(), a.grace)}")
    return 0


def cmd_logs(a: argparse.Namespace) -> int:
    from lab.engine import logs, registry

    rec = registry.get_run(a.run, _root())
    if a.rank is not None and a.rank not in logs.ranks(rec.run_dir):
        have = logs.ranks(rec.run_dir)
        raise UserError(
            f"run {a.run} has no rank {a.rank}: "
            + (f"use one of {have}" if have else "it has no per-rank logs; leave out --rank")
        )
    if a.follow:
        for ln in logs.follow(rec.run_dir, a.rank):
            print(ln, flush=True)
    else:
        text = logs.tail(rec.run_dir, a.lines, a.rank)
        if text:
            print(text)
    return 0


def cmd_gpus(a: argparse.Namespace) -> int:
    from lab.engine.devices import notes as device_notes

    snap = _snapshot()
    if a.json:
        _print(dataclasses.asdict(snap))
        return 0
    if snap.reason:
        print(snap.reason)
    for g in snap.gpus:
        mem = (
            f"{g.mem_used_mib:.0f}/{g.mem_total_mib:.0f} MiB"
            if g.mem_used_mib is not None
            else "mem n/a"
        )
        util = f"{g.util_pct:.0f}%" if g.util_pct is not None else "n/a"
        print(f"GPU {g.index} {g.name}: util {util}, {mem}")
    for line in device_notes.holders(snap) + device_notes.limits(snap):
        print(f"  {line}")
    c = snap.cpu
    print(
        f"CPU: {c.cores} cores, {c.util_pct:.0f}% busy, memory "
        f"{c.mem_used_mib:.0f}/{c.mem_total_mib:.0f} MiB"
    )
    return 0


def cmd_compare(a: argparse.Namespace) -> int:
    from lab.views.compare import document as compare_json

    runs = compare_json.resolve(a.runs + ([a.baseline] if a.baseline else []), _root())
    base = next((r.key for r in runs if a.baseline in (r.run_id, r.key)), None)
    if a.baseline and base is None:  # a sweep id: which of its runs is meant?
        raise UserError(f"--baseline {a.baseline}: give one run id, e.g. {runs[0].run_id}")
    scalars = compare_json.load_scalars(runs)
    problem = compare_json.tag_problem(a.throughput_tag, scalars)
    if problem:
        raise UserError(problem)
    doc = compare_json.comparison(runs, base, scalars, a.throughput_tag)
    _print(doc) if a.json else print("\n".join(compare_json.text(doc, runs)))
    return 0


def cmd_rm(a: argparse.Namespace) -> int:
    from lab.engine import registry

    registry.delete_run(a.run, _root())
    print(f"removed {a.run}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m lab", description="Parallel Training Lab: launch and watch runs."
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser(
        "launch", help="start a run in the background (the trainer, or --script of your own)"
    )
    cli_options.add_run_options(p)
    p.add_argument(
        "--dry-run", action="store_true", help="only print the pre-flight check and the command"
    )
    cli_script.add_options(p)
    p.set_defaults(func=cmd_launch)
    p = sub.add_parser("sweep", help="run several modes one after another")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument(
        "--scaling",
        default=STRONG,
        metavar="strong|weak",
        help="strong (default): every mode gets --batch-size as its global batch, the same "
        "training; "
        "weak: every device gets --batch-size, so the global batch grows with the devices",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run the modes N times, interleaved (3 shows the spread)",
    )
    cli_options.add_run_options(p, with_mode=False)
    p.set_defaults(func=cmd_sweep)
    p = sub.add_parser("status", help="runs and their states")
    p.add_argument("run", nargs="?")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("stop", help="stop a run (or a sweep id)")
    p.add_argument("run")
    p.add_argument("--grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL")
    p.set_defaults(func=cmd_stop)
    p = sub.add_parser("logs", help="a run's output")
    p.add_argument("run")
    p.add_argument("--follow", "-f", action="store_true")
    p.add_argument("--rank", type=int)
    p.add_argument("--lines", "-n", type=int, default=200)
    p.set_defaults(func=cmd_logs)
    p = sub.add_parser("gpus", help="devices now")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_gpus)
    from lab.views.compare.derived import STEP_RATE

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
    p = sub.add_parser("rm", help="delete a finished run")
    p.add_argument("run")
    p.set_defaults(func=cmd_rm)
    cli_health.add_parsers(sub)
    scalars_cli.add_parser(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    from lab.engine.launch.config import ConfigError
    from lab.engine.launch.launcher import LaunchError
    from lab.engine.launch.resume import ResumeError
    from lab.engine.registry import RunIsLive, RunNotFound
    from lab.runfolder import BadRunId

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # after --
    ours, script_args = cli_script.split_script_args(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(ours)
    args.script_args = script_args
    try:
        return int(args.func(args) or 0)
    except ConfigError as e:  # named as the flag the user typed
        print(
            f"error: {cli_options.FLAG.get(e.field, e.field).replace('_', '-')}: {e.message}",
            file=sys.stderr,
        )
    except (
        UserError,
        cli_script.ScriptUsageError,
        LaunchError,
        BadRunId,
        RunIsLive,
        RunNotFound,
        KeyError,
        OSError,
        ResumeError,
    ) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"error: {msg}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    return 2
