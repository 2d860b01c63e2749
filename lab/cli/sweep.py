"""``python -m lab sweep``: the same run in several modes, one after another, with repeats taking
turns, so each has the machine to itself."""

from __future__ import annotations

import argparse

from lab.cli import run_options
from lab.cli.common import UserError, print_json, root
from lab.engine.launch.config import MODES
from lab.engine.sweep.plan import STRONG, compare_modes_configs, interleaved, scaled


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
        for c in compare_modes_configs(run_options.run_config(a, "single", n), n, a.scaling)
    }
    configs = []
    for m in modes:
        c = by_mode[m]
        # the user chose devices: keep them for every mode
        if a.gpus is not None or a.nproc is not None:
            c = scaled(run_options.run_config(a, m, n), a.scaling)
        configs.append(c)
    sweep_id, run_ids = launcher.launch_sweep(
        interleaved(configs, a.repeats), root(), scaling=a.scaling
    )
    if a.json:
        print_json({"sweep_id": sweep_id, "run_ids": run_ids, "runs_dir": str(root())})
    else:
        print(sweep_id)
        for r in run_ids:
            print(f"  {r}")
    return 0


def add_parser(sub) -> None:
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
    run_options.add_run_options(p, with_mode=False)
    p.set_defaults(func=cmd_sweep)
