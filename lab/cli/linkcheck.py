"""``python -m lab linkcheck [--gpus LIST | --nproc N] [--max-mib M] [--model NAME] [--json]``:
an all-reduce sweep over message sizes (NCCL on GPUs, gloo on the CPU), time, algbw and busbw per
size, saved as ``<runs>/linkchecks/<id>.json`` with the topology (``lab.engine.linkcheck``); with
``--model``, also the all-gathers and reduce-scatters an fsdp run of that model makes, at each of
its units' sizes, printed as a table each."""

from __future__ import annotations

import argparse

from lab.cli.common import UserError, print_json, root


def _gpus(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of GPU indices: {text!r}") from None


def _size(n: float) -> str:
    return f"{n / 1024**2:g} MiB" if n >= 1024**2 else f"{n / 1024:g} KiB"


def cmd_linkcheck(a: argparse.Namespace) -> int:
    from lab.engine import linkcheck
    from lab.engine.devices.nvml import usable_indices
    from lab.views import linkcheck as shown

    try:
        p = linkcheck.plan(a.gpus, a.nproc, usable_indices())
        max_bytes = linkcheck.max_bytes_of(a.max_mib)
        model = linkcheck.model_of(a.model)
        rec = linkcheck.run(root(), p, max_bytes=max_bytes, iters=a.iters, model=model)
    except linkcheck.LinkCheckError as e:
        raise UserError(str(e)) from None
    if a.json:
        print_json(rec)
        return 0
    print(shown.heading(rec))
    _table(shown.rows(rec))
    for heading, rows in shown.tables(rec):
        print(heading)
        _table(rows)
    return 0


def _table(rows: list[dict]) -> None:
    print(f"{'size':>10} {'time ms':>10} {'algbw GB/s':>11} {'busbw GB/s':>11}")
    for r in rows:  # Home's rows: bandwidths to 4 figures, never a bare 0.000
        print(
            f"{_size(r['bytes']):>10} {r['time_ms']:>10.3f} {r['algbw (GB/s)']:>11g} "
            f"{r['busbw (GB/s)']:>11g}"
        )


def add_parser(sub) -> None:
    p = sub.add_parser(
        "linkcheck", help="all-reduce bandwidth per message size (NCCL on GPUs, gloo on the CPU)"
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--gpus", type=_gpus, help="GPU indices, e.g. 0,1 (default: every GPU)")
    which.add_argument(
        "--nproc", type=int, help="processes: the first N GPUs, or N CPU processes (gloo)"
    )
    p.add_argument(
        "--max-mib",
        type=float,
        help="the largest message in MiB, up to 1024 (1 GiB) (default 256 on GPUs, 16 on the CPU)",
    )
    p.add_argument("--iters", type=int, help="timed all-reduces per size (default 20 GPU, 10 CPU)")
    p.add_argument(
        "--model",
        help="also time the all-gathers and reduce-scatters of this model's fsdp units, at each "
        "unit's parameter bytes (tinycnn or a torchvision name)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_linkcheck)
