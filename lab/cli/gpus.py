"""``python -m lab gpus [--json]``: the devices now (GPUs, who holds them, what the lab cannot see
there, the links between them: ``topology``, or null and ``topology_note``), or the CPU view and
why there is no GPU."""

from __future__ import annotations

import argparse
import dataclasses

from lab.cli.common import print_json, snapshot


def cmd_gpus(a: argparse.Namespace) -> int:
    from lab.engine.devices import links
    from lab.engine.devices import notes as device_notes

    snap = snapshot()
    topo = links.topology_record()
    if a.json:
        print_json({**dataclasses.asdict(snap), **topo})
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
    if topo["topology"]:
        from lab.views.topology import matrix_lines

        print("\n".join(matrix_lines(topo["topology"])))
    c = snap.cpu
    print(
        f"CPU: {c.cores} cores, {c.util_pct:.0f}% busy, memory "
        f"{c.mem_used_mib:.0f}/{c.mem_total_mib:.0f} MiB"
    )
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("gpus", help="devices now")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_gpus)
