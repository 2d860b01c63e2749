"""The links between GPUs as Home and ``lab gpus`` show them: a matrix like ``nvidia-smi topo -m``.

``rows`` is the table (one row per GPU, one column per GPU; a cell is the link, ``NV2``, ``PHB``,
…, with ``· P2P <why not>`` where peer-to-peer reads do not work), ``matrix_lines`` the same as
text, ``LEGEND`` what the words mean. The matrix is ``lab.engine.devices.links.topology``'s.
"""

from __future__ import annotations

from typing import Any

from lab.engine.devices.links import LEGEND, topology_record

__all__ = ["LEGEND", "matrix_lines", "now", "rows"]


def now() -> tuple[list[dict[str, str]], str | None]:
    """This machine's matrix as rows, or ``([], why there is none)``."""
    rec = topology_record()
    return (rows(rec["topology"]), None) if rec["topology"] else ([], rec["topology_note"])


def _cell(link: str, p2p: str) -> str:
    return link if p2p in ("OK", "X") else f"{link} · P2P {p2p}"


def rows(topo: dict[str, Any] | None) -> list[dict[str, str]]:
    """One dict per GPU: ``{"GPU": "GPU 0", "GPU 0": "X", "GPU 1": "NV2", …}``."""
    if not topo:
        return []
    names = [f"GPU {i}" for i in topo["gpus"]]
    return [
        {"GPU": name, **{col: _cell(lk, pp) for col, lk, pp in zip(names, links, p2p)}}
        for name, links, p2p in zip(names, topo["links"], topo["p2p"])
    ]


def matrix_lines(topo: dict[str, Any] | None) -> list[str]:
    """The matrix as aligned text lines, its notes after it."""
    table = rows(topo)
    if not table:
        return []
    cols = list(table[0])
    width = max(len(str(v)) for r in table for v in [*r.values(), *r]) + 2
    lines = ["".join(c.ljust(width) if c != "GPU" else " " * width for c in cols).rstrip()]
    lines += ["".join(str(r[c]).ljust(width) for c in cols).rstrip() for r in table]
    return lines + [f"  {n}" for n in (topo or {}).get("notes") or ()]
