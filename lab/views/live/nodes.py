"""A Slurm run on the Live page: its job in a few words, and its device samples node by node.

``job_lines(record)`` says which Slurm job a run is, Slurm's state, its
nodes and, while it waits, why (``lab.engine.slurm.states.pending_note``:
Resources, Priority, PartitionTimeLimit...). ``node_charts(sys)`` turns the
``sys/node<k>/`` samples of each node's sampler (``lab.engine.slurm.node_sampler``)
into one set of charts per node: the node's GPUs as ``run_charts.sys_charts``
draws a local run's, then the whole node's CPU use and memory, each against
seconds since the node's first sample (one event holds all of a sample's
values, so the node's charts line up). A record is anything with
``lab.engine.registry.RunRecord``'s attributes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from lab.engine.slurm.states import pending_note
from lab.views.live.run_charts import sys_charts
from lab.views.text import ChartSpec

_NODE_TAG = re.compile(r"^sys/node(\d+)/(.+)$")
_HOST = (
    ("host_cpu_pct", "Node CPU use (all its processes)", "% of all cores", (0.0, 100.0)),
    ("host_mem_used_mib", "Node memory used (all its processes)", "MiB", None),
)


def job_lines(record: Any) -> list[str]:
    """What the page says of a run's Slurm job; empty for a run on this machine."""
    s = getattr(record, "slurm", None) or {}
    if not s.get("job_id"):
        return []
    nodes = f" on {s['nodes']}" if s.get("nodes") else ""
    out = [f"Slurm job {s['job_id']}: {s.get('state') or '?'}{nodes}"]
    if s.get("state") == "PENDING" and s.get("reason"):
        out.append(f"Waiting: {pending_note(s['reason'])}")
    return out


def node_scalars(sysd: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """node -> {tag without its ``sys/node<k>/`` prefix: series}, for the tags of the nodes'
    samplers."""
    out: dict[int, dict[str, Any]] = {}
    for tag, series in sysd.items():
        m = _NODE_TAG.match(tag)
        if m and len(series.value):
            out.setdefault(int(m.group(1)), {})[m.group(2)] = series
    return out


def node_charts(sysd: Mapping[str, Any]) -> list[tuple[str, list[ChartSpec]]]:
    """``[(f"node {k}", charts)]`` in node order: the node's GPU charts, then its CPU and memory."""
    out = []
    for k, tags in sorted(node_scalars(sysd).items()):
        t0 = min(float(np.asarray(s.wall_time)[0]) for s in tags.values())
        gpu = {f"sys/{t}": s for t, s in tags.items() if t.startswith("gpu")}
        specs = sys_charts(gpu)[0] if gpu else []
        for leaf, title, unit, y_range in _HOST:
            if leaf in tags:
                s = tags[leaf]
                x = np.asarray(s.wall_time, dtype=float) - t0
                specs.append(
                    ChartSpec(
                        title,
                        "time (s)",
                        unit,
                        [(f"node {k}", x, np.asarray(s.value, dtype=float))],
                        y_range,
                    )
                )
        out.append((f"node {k}", specs))
    return out
