"""The command line: ``python -m lab launch|sweep|status|stop|logs|gpus|rm|scalars``.

Thin argparse wrappers over ``lab.engine.launcher``, ``lab.engine.registry``, ``lab.engine.logs``
and ``lab.engine.devices``; the ``scalars`` subcommand comes from
``lab.events.export`` when it is present. Runs live in ./runs unless
``LAB_RUNS_DIR`` says otherwise. Any error is one line on stderr and exit
code 2, never a traceback. The JSON keys are documented in the README.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from lab.engine.config import RunConfig, compare_modes_configs
from lab.runfolder import ENDED_STATES


class UserError(Exception):
    """Bad input from the command line: printed as one line, exit 2."""


def _gpus_arg(text: str | None, mode: str, gpu_count: int) -> tuple[int, ...]:
    if text is None:  # default: what the mode makes sense with on this machine
        if gpu_count == 0:
            return ()
        return (0,) if mode == "single" else tuple(range(gpu_count))
    if text.strip().lower() in ("", "cpu", "none"):
        return ()
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UserError(f"--gpus {text!r} is not a list of GPU numbers: use e.g. --gpus 0,1 or --gpus cpu") from None


def _env_arg(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items or []:
        if "=" not in it:
            raise UserError(f"--env {it!r} is not KEY=VALUE: use e.g. --env NCCL_DEBUG=INFO")
        k, v = it.split("=", 1)
        out[k] = v
    return out


def _add_run_options(p: argparse.ArgumentParser, with_mode: bool = True) -> None:
    if with_mode:
        p.add_argument("--mode", choices=("single", "dp", "ddp"), default="single")
    p.add_argument("--gpus", help="physical GPU numbers, e.g. 0,1; 'cpu' for none (default: all for dp/ddp, 0 for single)")
    p.add_argument("--nproc", type=int, help="ddp: processes per node (default: one per GPU, 2 on the CPU)")
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--rdzv-endpoint", default="", help="host:port of node 0 when --nnodes > 1")
    p.add_argument("--model", default="tinycnn")
    p.add_argument("--dataset", default="digits", help="digits | synthetic | imagefolder:PATH")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=64, help="the global batch")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--val-every", type=int, default=0)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--checkpoint", choices=("last", "none"), default="last")
    p.add_argument("--grad-norm-warn", type=float, default=0.0)
    p.add_argument("--name", default="")
    p.add_argument("--tag", action="append", default=[], help="a tag (repeatable)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra environment (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON")


def _config(a: argparse.Namespace, mode: str, gpu_count: int) -> RunConfig:
    gpus = _gpus_arg(a.gpus, mode, gpu_count)
    nproc = a.nproc if a.nproc is not None else ((len(gpus) or 2) if mode == "ddp" else 1)
    return RunConfig(mode=mode, gpus=gpus, nproc=nproc, nnodes=a.nnodes, node_rank=a.node_rank,
                     rdzv_endpoint=a.rdzv_endpoint, model=a.model, dataset=a.dataset, batch_size=a.batch_size,
                     epochs=a.epochs, max_steps=a.max_steps, lr=a.lr, amp=a.amp, workers=a.workers, seed=a.seed,
                     name=a.name, tags=tuple(a.tag), extra_env=_env_arg(a.env), log_every=a.log_every,
                     val_every=a.val_every, image_size=a.image_size, checkpoint=a.checkpoint,
                     grad_norm_warn=a.grad_norm_warn)


def _root() -> Path:
    from lab.runfolder import runs_dir

    return runs_dir()


def _print(obj: Any) -> None:
    print(json.dumps(obj, indent=1, default=str))


def cmd_launch(a: argparse.Namespace) -> int:
    from lab.engine import devices, launcher, registry

    cfg = _config(a, a.mode, devices.gpu_count())
    run_id = launcher.launch(cfg, _root())
    rec = registry.get_run(run_id, _root())
    if a.json:
        _print({"run_id": run_id, "state": rec.state, "run_dir": rec.run_dir, "mode": cfg.mode})
    else:
        print(f"{run_id} {rec.state} {rec.run_dir}")
    return 0


def cmd_sweep(a: argparse.Namespace) -> int:
    from lab.engine import devices, launcher

    n = devices.gpu_count()
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in ("single", "dp", "ddp")]
    if bad or not modes:
        raise UserError(f"--modes {a.modes!r}: use a comma list of single, dp, ddp")
    by_mode = {c.mode: c for c in compare_modes_configs(_config(a, "single", n), n)}
    configs = []
    for m in modes:
        c = by_mode[m]
        if a.gpus is not None or a.nproc is not None:  # the user chose devices: keep them for every mode
            c = _config(a, m, n)
        configs.append(c)
    sweep_id, run_ids = launcher.launch_sweep(configs, _root())
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
    prog = r.progress or {}
    step = f" step {prog.get('step')}/{prog.get('total_steps')}" if prog.get("step") is not None else ""
    return f"{r.run_id:48} {r.state:10} {r.mode or '-':6}{step}{why}"


def cmd_status(a: argparse.Namespace) -> int:
    from lab.engine import registry

    if a.run:
        rec = registry.get_run(a.run, _root())
        _print(rec.to_json()) if a.json else print(_status_line(rec))
        return 0
    recs = registry.list_runs(_root())
    if a.json:
        _print([r.to_json() for r in recs])
    elif not recs:
        print(f"no runs in {_root()}")
    else:
        for r in recs:
            print(_status_line(r))
    return 0


def cmd_stop(a: argparse.Namespace) -> int:
    from lab.engine import launcher, registry

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
        raise UserError(f"run {a.run} has no rank {a.rank}: " + (f"use one of {have}" if have else "it has no per-rank logs; leave out --rank"))
    if a.follow:
        for ln in logs.follow(rec.run_dir, a.rank):
            print(ln, flush=True)
    else:
        text = logs.tail(rec.run_dir, a.lines, a.rank)
        if text:
            print(text)
    return 0


def cmd_gpus(a: argparse.Namespace) -> int:
    from dataclasses import asdict

    from lab.engine import devices

    snap = devices.snapshot(_root())
    if a.json:
        _print(asdict(snap))
        return 0
    if snap.reason:
        print(snap.reason)
    for g in snap.gpus:
        mem = f"{g.mem_used_mib:.0f}/{g.mem_total_mib:.0f} MiB" if g.mem_used_mib is not None else "mem n/a"
        util = f"{g.util_pct:.0f}%" if g.util_pct is not None else "n/a"
        print(f"GPU {g.index} {g.name}: util {util}, {mem}")
    for line in devices.holders(snap):
        print(f"  {line}")
    c = snap.cpu
    print(f"CPU: {c.cores} cores, {c.util_pct:.0f}% busy, memory {c.mem_used_mib:.0f}/{c.mem_total_mib:.0f} MiB")
    return 0


def cmd_rm(a: argparse.Namespace) -> int:
    from lab.engine import registry

    registry.delete_run(a.run, _root())
    print(f"removed {a.run}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m lab", description="Parallel Training Lab: launch and watch runs.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("launch", help="start a run in the background")
    _add_run_options(p)
    p.set_defaults(func=cmd_launch)
    p = sub.add_parser("sweep", help="run several modes one after another")
    p.add_argument("--modes", default="single,dp,ddp")
    _add_run_options(p, with_mode=False)
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
    p = sub.add_parser("rm", help="delete a finished run")
    p.add_argument("run")
    p.set_defaults(func=cmd_rm)
    try:  # written by the event-reader engineer; the CLI works without it
        from lab.events import export as scalars_cli

        scalars_cli.add_parser(sub)
        if "scalars" in sub.choices:
            sub.choices["scalars"].set_defaults(func=scalars_cli.run)
    except Exception as e:  # a broken optional part must not take the whole CLI down
        logging.getLogger(__name__).debug("no scalars subcommand: %s", e)
    return ap


def main(argv: list[str] | None = None) -> int:
    from lab.engine.config import ConfigError
    from lab.engine.launcher import LaunchError
    from lab.runfolder import BadRunId
    from lab.engine.registry import RunIsLive, RunNotFound

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ConfigError as e:
        print(f"error: {e.field.replace('_', '-')}: {e.message}", file=sys.stderr)
    except (UserError, LaunchError, BadRunId, RunIsLive, RunNotFound, KeyError, OSError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"error: {msg}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    return 2
