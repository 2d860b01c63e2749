"""What the pages say about a run's health: the Live banner, the Home badge, the stacks, restarts
and resume links.

Owns the words and the shape of what is shown; the findings themselves are
the supervisor's (status.json's ``health``, ``lab.engine.health.rules``), read
through the registry's record. ``banner`` is one box per finding (title,
message, fix, when, and the evidence as lines: the device strip of a
stalled run, the stacks saved); ``badge`` the short text of the Home runs
list; ``stack_files`` the newest dump of ``stacks/`` (one text per rank);
``restart_lines`` each torchrun restart with its cause; ``link_lines`` the
resume links both ways. A record is anything with
``lab.engine.registry.RunRecord``'s attributes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lab.runfolder import STACKS_DIR, parse_time

TITLES = {
    "stalled": "Stalled",
    "nan_loss": "Loss is NaN",
    "chance_accuracy": "Accuracy at chance",
    "input_bound": "Input-bound",
    "grad_spike": "Gradient spikes",
}
_STACK_FILE = re.compile(r"^(?P<who>rank\d+|torchrun)-(?P<at>\d{8}-\d{6})(?:-\d+)?\.txt$")


def _when(iso: str) -> str:
    t = parse_time(iso)
    return t.strftime("%H:%M:%S UTC") if t else (iso or "?")


def _device_line(d: dict[str, Any]) -> str:
    if "gpu" in d:
        util = "n/a" if d.get("util_pct") is None else f"{d['util_pct']:.0f}%"
        mem = "n/a" if d.get("mem_used_mib") is None else f"{d['mem_used_mib'] / 1024:.1f} GiB"
        return f"GPU {d['gpu']}: util {util}, memory {mem}"
    cpu = "n/a" if d.get("cpu_pct") is None else f"{d['cpu_pct']:.0f}% of one core"
    rss = "n/a" if d.get("rss_mib") is None else f"{d['rss_mib'] / 1024:.1f} GiB"
    return f"CPU (the run's processes): {cpu}, memory {rss}"


def evidence_lines(finding: dict[str, Any]) -> list[str]:
    """The evidence of a finding in words: the device strip and the stacks of a stalled run, else
    its figures."""
    ev = dict(finding.get("evidence") or {})
    out = []
    if ev.get("devices"):
        out.append("Devices at that moment: " + "; ".join(_device_line(d) for d in ev["devices"]))
    if ev.get("stacks"):
        out.append("Stacks saved: " + ", ".join(ev["stacks"]))
    out += [f"Not taken: {n}" for n in ev.get("stack_notes") or []]
    skip = {"devices", "stacks", "stack_notes", "stacks_at"}
    figures = ", ".join(f"{k} {v}" for k, v in ev.items() if k not in skip and v is not None)
    return out + ([figures] if figures else [])


def banner(record: Any) -> list[dict[str, Any]]:
    """One box per finding: ``title``, ``message``, ``fix``, ``since`` (a time), ``lines`` (the
    evidence)."""
    return [
        {
            "key": f.get("key"),
            "title": TITLES.get(str(f.get("key")), str(f.get("key"))),
            "message": f.get("message", ""),
            "fix": f.get("fix", ""),
            "since": _when(str(f.get("since") or "")),
            "lines": evidence_lines(f),
        }
        for f in getattr(record, "health", None) or []
        if isinstance(f, dict)
    ]


def badge(record: Any) -> str:
    """The Home list's cell: the findings' titles, or empty when all is well."""
    keys = [str(f.get("key")) for f in getattr(record, "health", None) or [] if isinstance(f, dict)]
    return ", ".join(TITLES.get(k, k) for k in keys)


def stack_files(run_dir: Path | str) -> tuple[str | None, list[tuple[str, Path]]]:
    """The newest dump in ``stacks/``: (its time stamp, [(who, file)] rank order); (None, []) when
    none."""
    groups: dict[str, list[tuple[str, Path]]] = {}
    try:
        entries = list(Path(run_dir, STACKS_DIR).iterdir())
    except OSError:
        return None, []
    for p in entries:
        m = _STACK_FILE.match(p.name)
        if m:
            groups.setdefault(m.group("at"), []).append((m.group("who"), p))
    if not groups:
        return None, []
    at = max(groups)

    def order(item: tuple[str, Path]) -> tuple:
        who, path = item
        return (
            who == "torchrun",
            int(who[4:]) if who.startswith("rank") else 0,
            len(path.name),
            path.name,
        )

    return at, sorted(groups[at], key=order)


def restart_lines(record: Any) -> list[str]:
    """One line per torchrun restart: which attempt began, and why the one before ended."""
    out = []
    for r in getattr(record, "restarts", None) or []:
        if isinstance(r, dict):
            out.append(f"Restart {r.get('attempt')}: {r.get('cause') or 'a worker failed'}")
    return out


def link_lines(record: Any) -> list[str]:
    """The resume links of a run, both ways, in words."""
    out = []
    if getattr(record, "resumed_from", None):
        out.append(f"Resumed from {record.resumed_from} (its last checkpoint).")
    by = getattr(record, "resumed_by", None) or []
    if by:
        out.append(f"Resumed by {', '.join(by)}.")
    return out
