"""A noise record, ``<runs_root>/noise/<id>.json``, and the margin Compare takes from it.

The record is ``{"id", "config", "runs", "throughputs", "spread_pct", "margin_pct", "host",
"devices", "created_at"}``: the config (``RunConfig.to_dict``), the run ids in order, each run's
steady-state throughput (samples/s: the median of its logging windows, summary.json's
``throughput``), the host, the device count the runs trained on (the ways the batch split,
``world_size``) and when it was written.

- ``spread_pct`` = (max - min) / median of the throughputs, in %: how far apart identical runs
  landed.
- ``margin_pct`` = max(``MARGIN_FLOOR_PCT``, ``spread_pct`` / 2): half the spread, the most a run
  strays from the middle of the range, never below 5%. Compare's verdict calls a speedup faster
  or slower only beyond this margin around 1.0 (its documented default without a record: 10%).

``latest_margin(runs_root, host, devices)`` is the newest record's margin for that host and
device count, with words that say where it came from (``Margin``); None when none was measured.
"""

from __future__ import annotations

import secrets
import socket
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.runfolder import now_iso, read_json, stamp, write_json_atomic

NOISE_DIR = "noise"  # in the runs root
MIN_RUNS = 3  # fewer runs say nothing of a spread
MARGIN_FLOOR_PCT = 5.0
KEYS = ("config", "runs", "throughputs", "spread_pct", "margin_pct")


@dataclass(frozen=True)
class Margin:
    """A verdict's noise margin in percent, and where it came from in words."""

    pct: float
    source: str


def spread_pct(throughputs: Sequence[float]) -> float:
    """(max - min) / median of ``throughputs``, in %."""
    xs = [float(x) for x in throughputs]
    median = statistics.median(xs)
    return 100.0 * (max(xs) - min(xs)) / median if median > 0 else float("inf")


def margin_pct(spread: float) -> float:
    """The verdict margin of a measured spread: half of it, never below ``MARGIN_FLOOR_PCT``."""
    return max(MARGIN_FLOOR_PCT, spread / 2.0)


def new_id() -> str:
    return f"{stamp()}-{secrets.token_hex(2)}"


def make(
    config: dict[str, Any], runs: Sequence[str], throughputs: Sequence[float], devices: int
) -> dict[str, Any]:
    """A record of ``runs`` (their steady throughputs in the same order)."""
    if len(throughputs) < MIN_RUNS:
        raise ValueError(f"a noise record needs {MIN_RUNS} or more throughputs")
    spread = spread_pct(throughputs)
    return {
        "id": new_id(),
        "config": config,
        "runs": list(runs),
        "throughputs": [round(float(t), 3) for t in throughputs],
        "spread_pct": round(spread, 2),
        "margin_pct": round(margin_pct(spread), 2),
        "host": socket.gethostname(),
        "devices": int(devices),
        "created_at": now_iso(),
    }


def write(runs_root: Path, record: dict[str, Any]) -> Path:
    """Write the record as ``<runs_root>/noise/<id>.json``; its path."""
    path = Path(runs_root) / NOISE_DIR / f"{record['id']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, record)
    return path


def records(runs_root: Path) -> list[dict[str, Any]]:
    """Every readable record, oldest first."""
    folder = Path(runs_root) / NOISE_DIR
    found = [read_json(p) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []
    good = [r for r in found if r and all(k in r for k in KEYS)]
    return sorted(good, key=lambda r: str(r.get("created_at") or ""))


def latest(runs_root: Path) -> dict[str, Any] | None:
    """The newest record of any host and device count; None when there is none."""
    found = records(runs_root)
    return found[-1] if found else None


def describe(r: dict[str, Any]) -> str:
    """One line of a record, as Home shows the latest."""
    return (
        f"Latest: noise {r.get('id')} on {r.get('host')}, {r.get('devices')} device(s), "
        f"{len(r['runs'])} runs: spread {r['spread_pct']:.1f}%, margin {r['margin_pct']:.1f}% "
        f"({r.get('created_at')})"
    )


def latest_margin(runs_root: Path, host: str, devices: int) -> Margin | None:
    """The newest margin measured on ``host`` with ``devices`` devices; None when none was."""
    mine = [r for r in records(runs_root) if r.get("host") == host and r.get("devices") == devices]
    if not mine:
        return None
    r = mine[-1]
    words = f"{devices} device{'s' if devices != 1 else ''}"
    return Margin(
        float(r["margin_pct"]),
        f"measured on host {host}, {words}, noise {r.get('id')} ({len(r['runs'])} runs)",
    )
