"""``python -m lab sweep``: the same run in several modes, one after another, with repeats taking
turns, so each has the machine to itself; ``--vary NAME=V1,V2`` crosses a run option's values
with them (``lab.engine.sweep.vary``)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from lab.cli import run_options, script_options
from lab.cli.common import UserError, print_json, root
from lab.cli.parser import PROG
from lab.engine.spec import backends
from lab.engine.spec.modes import MODES, SWEEP_DEFAULT
from lab.engine.spec.run import CPU_DDP_PROCESSES
from lab.engine.sweep import vary
from lab.engine.sweep.plan import (
    STRONG,
    compare_modes_configs,
    device_count_configs,
    scaled,
    slurm_count_configs,
)
from lab.runfolder import TRAINER


def cmd_sweep(a: argparse.Namespace) -> int:
    from lab.engine.devices import nvml as devices
    from lab.engine.launch import sweeps

    # a bad --vary is one line before anything else; a script's sweep varies the script's flags
    axes = vary.parse(a.vary, script=script_options.wanted(a))
    n = devices.usable_indices()
    modes = [m.strip().lower() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise UserError(f"--modes {a.modes!r}: use a comma list of {', '.join(MODES)}")
    if a.script_args and not script_options.wanted(a):
        raise UserError(
            "arguments after -- go to a script of your own: give --script PATH (or --module NAME)"
        )
    if script_options.wanted(a):
        configs = _script_configs(a, modes, n)
        runs, varied = vary.sweep_runs(configs, axes, a.repeats)
        if a.dry_run:
            return _show_plan(runs, varied, a, n)
        sweep_id, run_ids = sweeps.launch_sweep(runs, root(), varied=varied)
    else:
        if not backends.named(a.backend).runs_here:  # a job's GPUs are its nodes'
            configs = _slurm_configs(a, modes, n)
        elif a.devices is not None or a.nproc is not None:
            configs = _count_configs(a, modes, n)
        else:
            configs = _mode_configs(a, modes, n)
        runs, varied = vary.sweep_runs(configs, axes, a.repeats)
        if a.dry_run:
            return _show_plan(runs, varied, a, n)
        sweep_id, run_ids = sweeps.launch_sweep(runs, root(), scaling=a.scaling, varied=varied)
    # after the launch, so that a refused sweep prints its one error line and nothing else
    if "dp" in modes and not any(c.gpus for c in configs):
        print("note: dp on the CPU runs on one device: it runs once, at count 1", file=sys.stderr)
    if a.json:
        print_json({"sweep_id": sweep_id, "run_ids": run_ids, "runs_dir": str(root())})
    else:
        print(sweep_id)
        for r in run_ids:
            print(f"  {r}")
        print(f"next: {PROG} status {sweep_id}, then {PROG} compare {sweep_id}", file=sys.stderr)
    return 0


def _show_plan(runs: list, varied: list | None, a: argparse.Namespace, n: tuple[int, ...]) -> int:
    """``sweep --dry-run``: each run in the order it would run, refused as the sweep would be,
    with its pre-flight lines and command (as ``launch --dry-run`` shows one run); starts
    nothing."""
    from lab.engine import registry
    from lab.engine.devices import nvml as devices
    from lab.engine.launch import request, script, script_form
    from lab.engine.launch.config import validate
    from lab.engine.preflight.checks import machine_facts
    from lab.views.text import shell_line

    snap = devices.snapshot(registry.process_owner(root()))
    plan = []
    for i, c in enumerate(runs):
        if c.kind == TRAINER:
            validate(c, n, machine_facts(c, snap.gpus))
            p = request.preview(c, snap, root())
        else:  # a script of the user's
            script.validate(c, n)
            p = script_form.preview(c, snap, root())
        v = (varied or [None] * len(runs))[i]
        plan.append({"order": i + 1, "mode": c.mode, "varied": v, **dataclasses.asdict(p)})
    if a.json:
        print_json({"runs": plan})
        return 0
    n = len(plan)
    runs = f"{n} run{'s' * (n != 1)}"
    print(f"# {runs}, one after another, in this order (nothing started: --dry-run)")
    for run in plan:
        values = " ".join(f"{k}={x}" for k, x in (run["varied"] or {}).items())
        print(f"# {run['order']}. {run['mode']} {values}".rstrip())
        print("\n".join(f"#   {line}" for line in run["preflight"]))
        print(shell_line(run["argv"], run["env"], cwd=run["cwd"]))
    return 0


def _mode_configs(a: argparse.Namespace, modes: list[str], n: tuple[int, ...]) -> list:
    base = run_options.run_config(a, "single", n)
    by_mode = {c.mode: c for c in compare_modes_configs(base, n, a.scaling, modes)}
    configs = []
    for m in modes:
        c = by_mode[m]
        if a.gpus is not None:  # the user chose devices: keep them for every mode
            c = scaled(run_options.run_config(a, m, n), a.scaling)
        configs.append(c)
    return configs


def _count_configs(a: argparse.Namespace, modes: list[str], n: tuple[int, ...]) -> list:
    """modes x device counts; in a sweep ``--nproc N`` is DDP's processes per node (count N)."""
    counts = _counts(a.devices) if a.devices is not None else [a.nproc]
    pool = n
    if a.gpus is not None:  # the GPUs the counts take their first N from
        pool = run_options.run_config(argparse.Namespace(**{**vars(a), "nproc": None}), "dp", n)
        pool = pool.gpus
    base = run_options.run_config(
        argparse.Namespace(**{**vars(a), "nproc": None, "gpus": None}), "single", n
    )
    return device_count_configs(base, pool, modes, counts, a.scaling, os.cpu_count() or 1)


def _slurm_configs(a: argparse.Namespace, modes: list[str], n: tuple[int, ...]) -> list:
    """One Slurm job per mode and count: ``--devices``, else ``--nproc``, else a node's GPUs (or
    2 DDP processes on CPU nodes)."""
    base = run_options.run_config(argparse.Namespace(**{**vars(a), "nproc": None}), "single", n)
    if a.devices is not None:
        counts = _counts(a.devices)
    else:
        counts = [a.nproc or base.gpus_per_node or CPU_DDP_PROCESSES]
    return slurm_count_configs(base, modes, counts, a.scaling)


def _script_configs(a: argparse.Namespace, modes: list[str], n: tuple[int, ...]) -> list:
    """The user's script at every mode and count, as ``launch --script`` would run it: the counts
    of ``--devices``, else ``--nproc``, else every visible GPU (2 gloo processes on the CPU)."""
    from lab.engine.launch import script, script_form

    if a.scaling != STRONG:
        raise UserError(f"--scaling {a.scaling}: {script.SCRIPT_SCALING}")
    values = script_options.values(a)

    def config(mode: str):
        cfg, unreadable = script_form.script_config(dict(values, mode=mode), n)
        if unreadable:
            raise unreadable[0]
        return cfg

    base = config("single")
    # one job per mode and count, as the trainer's (_slurm_configs)
    if not backends.of(base).runs_here:
        counts = _counts(a.devices) if a.devices is not None else [a.nproc or CPU_DDP_PROCESSES]
        return slurm_count_configs(base, modes, counts, STRONG)
    if a.devices is not None:
        counts = _counts(a.devices)
    else:
        counts = [a.nproc or len(n) or CPU_DDP_PROCESSES]
    pool = config("dp").gpus if a.gpus is not None else n
    return device_count_configs(base, pool, modes, counts, STRONG, os.cpu_count() or 1)


def _counts(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(
            f"--devices {text!r}: use a comma list of device counts, e.g. 1,2,4"
        ) from None


def add_parser(sub) -> None:
    p = sub.add_parser("sweep", help="run several modes one after another")
    p.add_argument(
        "--modes",
        default=",".join(SWEEP_DEFAULT),
        help=f"the modes to run, a comma list of {','.join(MODES)} (case does not matter; "
        f"default: {','.join(SWEEP_DEFAULT)}: fsdp when asked, it answers a memory question)",
    )
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
        help="run the modes N times, interleaved (3 shows the spread; default: 1)",
    )
    p.add_argument(
        "--devices",
        metavar="N,N,...",
        help="device counts to cross with the modes, e.g. 1,2,4,8: the first N usable GPUs of "
        "--gpus, or N DDP processes (gloo) on the CPU (default: all visible GPUs only)",
    )
    p.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="cross a run option's values with the modes, counts and repeats, interleaved "
        "(repeatable): NAME is its flag without dashes, e.g. bucket-cap-mb=1,25,100 or "
        "accum-steps=1,4 (switches: off,on); DDP's options vary the ddp runs only; with "
        "--script, NAME is a flag of your script (lr=0.1,0.01 gives it --lr 0.1, then --lr "
        "0.01); each run.json records its values as varied",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="only print each run's pre-flight check and command, in the order they would run",
    )
    run_options.add_run_options(p, with_mode=False)
    script_options.add_options(p, launch=False)
    p.set_defaults(func=cmd_sweep)
