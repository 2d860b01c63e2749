"""NCCL's chosen transports, read from its own log (``NCCL_DEBUG=INFO``,
``NCCL_DEBUG_SUBSYS=INIT,GRAPH``).

NCCL logs one line per channel and peer when it connects, e.g.
``host:919:1150 [0] NCCL INFO Channel 01/0 : 8[0] -> 15[7] via P2P/IPC/read`` or
``... Channel 03/0 : 15[7] -> 6[6] [send] via NET/Socket/3`` (older versions: ``Channel 00 :
11[3e000] -> 9[1b000] via P2P/direct pointer``), and its version as ``NCCL INFO NCCL version
2.18.1+cuda12.1``. ``parse`` reads such text (any prefix before the host, e.g. a logger's, is
ignored) into ``{"nccl_version", "transports": {"P2P": n, "SHM": n, "NET": n, ...}, "links":
[{"from", "to", "via"}]}``: the count of channel connections per transport kind, and each rank
pair's distinct transports. Lines of other kinds are ignored; text without such lines gives
empty counts (NCCL not used, or logged without INIT/GRAPH).
"""

from __future__ import annotations

import re
from collections import Counter

_CHANNEL = re.compile(
    r"NCCL INFO Channel \d+(?:/\d+)? : (\d+)\[[0-9a-fx]+\] -> (\d+)\[[0-9a-fx]+\]"
    r"(?: \[(?:send|receive)\])? via (\S+(?: pointer)?)"
)
_VERSION = re.compile(r"NCCL INFO NCCL version ([0-9][0-9.]*)")
KINDS = ("P2P", "SHM", "NET", "NVLS", "COLLNET")


def kind(via: str) -> str:
    """The transport kind of a ``via`` word: ``P2P/IPC/read`` -> ``P2P``, ``NET/IB/0/GDRDMA``
    -> ``NET``, ``direct shared memory`` -> ``SHM``."""
    head = via.split("/", 1)[0].upper()
    if head in KINDS:
        return head
    return "SHM" if "shared" in via else head


def parse(text: str) -> dict:
    """The NCCL version and transports in NCCL log ``text`` (see the module docstring)."""
    counts: Counter[str] = Counter()
    pairs: dict[tuple[int, int], set[str]] = {}
    version = None
    for line in text.splitlines():
        if "NCCL INFO" not in line:
            continue
        m = _CHANNEL.search(line)
        if m:
            via = m.group(3)
            counts[kind(via)] += 1
            pairs.setdefault((int(m.group(1)), int(m.group(2))), set()).add(via)
            continue
        v = _VERSION.search(line)
        if v and version is None:
            version = v.group(1)
    links = [{"from": a, "to": b, "via": sorted(vias)} for (a, b), vias in sorted(pairs.items())]
    return {"nccl_version": version, "transports": dict(counts), "links": links}


def summary(parsed: dict) -> str:
    """One line: ``P2P 16, NET 4 channel connections`` (or that none were logged)."""
    t = parsed.get("transports") or {}
    if not t:
        return "no NCCL transport lines (NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=INIT,GRAPH)"
    return ", ".join(f"{k} {n}" for k, n in sorted(t.items())) + " channel connections"
