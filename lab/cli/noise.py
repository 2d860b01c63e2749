"""``python -m lab noise [run options] --runs N``: this machine's noise floor. One config (the
launch flags, the trainer's defaults otherwise) runs N times one after another as one sweep,
taking turns with nothing else the lab runs; each run's steady throughput and their spread are
recorded as ``<runs>/noise/<id>.json`` (``lab.engine.noise``), whose margin Compare's verdicts
use for this host and device count."""

from __future__ import annotations

import argparse

from lab.cli import run_options
from lab.cli.common import UserError, print_json, root


def cmd_noise(a: argparse.Namespace) -> int:
    from lab.engine.devices import nvml as devices
    from lab.engine.noise import measure

    try:
        measure.check_runs(a.runs)  # before anything starts
        cfg = run_options.run_config(a, a.mode, devices.usable_indices())
        sweep_id, run_ids = measure.start(cfg, a.runs, root())
        if not a.json:
            print(f"{sweep_id}: {a.runs} runs of one config, one after another", flush=True)
        rec = measure.finish(root(), cfg, run_ids)
    except measure.NoiseError as e:
        raise UserError(str(e)) from None
    if a.json:
        print_json(rec)
        return 0
    values = ", ".join(f"{t:.1f}" for t in rec["throughputs"])
    print(f"noise {rec['id']} on {rec['host']}, {rec['devices']} device(s): samples/s {values}")
    print(
        f"spread {rec['spread_pct']:.1f}% ((max - min) / median); "
        f"verdict margin {rec['margin_pct']:.1f}% (half the spread, at least 5%)"
    )
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "noise",
        help="run one config N times, taking turns, and record this machine's run-to-run spread",
    )
    run_options.add_run_options(p)
    p.add_argument(
        "--runs", type=int, default=5, metavar="N", help="how many runs (3 or more; default 5)"
    )
    p.set_defaults(func=cmd_noise)
