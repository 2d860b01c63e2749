"""The links between GPUs, read through the NVML gateway (``lab.engine.devices.nvml``'s ``_call``,
``_query`` and ``constant``; no NVML import here): the topology and the traffic.

``topology(indices)`` is the matrix ``nvidia-smi topo -m`` prints, for every pair of GPUs: the
NVLink between them with its count of active links (``NV2``: ``nvmlDeviceGetNvLinkState`` per
link, the far end named by ``nvmlDeviceGetNvLinkRemotePciInfo``; links to an NVSwitch join every
pair of GPUs that has them, as ``NV<the fewer of the two>``), else the PCIe path from
``nvmlDeviceGetTopologyCommonAncestor`` (``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``), and
whether peer-to-peer reads work (``nvmlDeviceGetP2PStatus`` with ``NVML_P2P_CAPS_INDEX_READ``:
``OK``, or why not, in ``nvidia-smi topo -p2p r``'s words). It is ``lab gpus --json``'s and
run.json's ``topology``; without a GPU it is None and the reason.

``LinkMeter`` is the supervisor's sampler's link traffic per GPU, as rates between two samples
of cumulative counters wherever the driver has them (Δbytes/Δt, from the second sample on): PCIe
receive/transmit from the field values ``NVML_FI_DEV_PCIE_COUNT_RX_BYTES``/``TX_BYTES`` (bytes)
as ``sys/gpu<i>/pcie_rx_mib_s`` and ``pcie_tx_mib_s``; where those are not supported, from
``nvmlDeviceGetPcieThroughput`` (KiB/s over NVML's last 20 ms: a snapshot, not the interval's
average, which ``note()`` says). NVLink data throughput from
``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX``/``TX`` summed over the links (KiB counters), falling
back, where those say NotSupported, to the per-link byte counters
``NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES``/``XMIT_BYTES`` summed over the links that give them, as
``nvlink_rx_mib_s`` and ``nvlink_tx_mib_s``. What the driver does not give, and which GPUs'
PCIe figures are snapshots, is a note (``note()``), never an error.
"""

from __future__ import annotations

import time
from typing import Any

from lab import tags
from lab.engine.devices import nvml

# NVML_TOPOLOGY_* -> nvidia-smi topo -m's words (INTERNAL: two GPUs on one board)
LEVELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# NVML_P2P_STATUS_* -> nvidia-smi topo -p2p r's words
P2P_WORDS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "DR", 5: "NS", 6: "U"}
LEGEND = (
    "X = the GPU itself; NV# = NVLink, # active links; PIX = through at most one PCIe switch; "
    "PXB = through several PCIe switches; PHB = through a PCIe host bridge (the CPU); "
    "NODE = across host bridges within one NUMA node; SYS = across NUMA nodes. "
    "Peer-to-peer reads: OK; CNS/GNS/TNS = not supported by the chipset/GPU/topology; "
    "DR = disabled by the driver's registry key; NS = not supported; U = unknown."
)
_ALL_LINKS = 0xFFFFFFFF  # a field value's scopeId: summed over every NVLink
_KIB = 1024.0
_MIB = 1024.0 * 1024.0


def _pci(info: Any) -> tuple[int, int, int] | None:
    """(domain, bus, device) of an NVML PCI record: how a link's far end is matched to a GPU."""
    try:
        return int(info.domain), int(info.bus), int(info.device)
    except (AttributeError, TypeError, ValueError):
        return None


def _nvlinks(h: Any) -> dict[tuple[int, int, int] | None, int]:
    """Active NVLinks of one GPU by the PCI address at their far end (None: not readable)."""
    out: dict[tuple[int, int, int] | None, int] = {}
    enabled = nvml.constant("NVML_FEATURE_ENABLED", 1)
    for link in range(nvml.constant("NVML_NVLINK_MAX_LINKS", 18)):
        state, why = nvml._call("nvmlDeviceGetNvLinkState", h, link)
        if why:  # not supported: no NVLink; invalid argument: past the GPU's last link
            break
        if state == enabled:
            far = _pci(nvml._query("nvmlDeviceGetNvLinkRemotePciInfo", h, link))
            out[far] = out.get(far, 0) + 1
    return out


def _link_word(a: dict, b: dict, pci_a: Any, pci_b: Any, gpu_pcis: set) -> str | None:
    """``NV<n>`` between two GPUs with per-far-end link counts ``a`` and ``b``, or None."""
    direct = a.get(pci_b, 0) or b.get(pci_a, 0)
    if direct:
        return f"NV{direct}"
    switch_a = sum(n for far, n in a.items() if far is not None and far not in gpu_pcis)
    switch_b = sum(n for far, n in b.items() if far is not None and far not in gpu_pcis)
    return f"NV{min(switch_a, switch_b)}" if switch_a and switch_b else None


def topology(indices: tuple[int, ...] | None = None) -> tuple[dict | None, str | None]:
    """``({"gpus", "links", "p2p", "notes"}, None)`` for the GPUs (all, or physical ``indices``)
    NVML opens, or ``(None, why there is none)``."""
    n, why = nvml._call("nvmlDeviceGetCount")
    if why:
        return None, why
    every = {i: nvml._query("nvmlDeviceGetHandleByIndex", i) for i in range(int(n or 0))}
    every = {i: h for i, h in every.items() if h is not None}
    order = [i for i in sorted(every) if indices is None or i in indices]
    if not order:
        return None, "NVML sees no GPUs it can read" if not indices else "NVML opens none of them"
    pcis = {i: _pci(nvml._query("nvmlDeviceGetPciInfo", every[i])) for i in every}
    gpu_pcis = {p for p in pcis.values() if p is not None}
    nv = {i: _nvlinks(every[i]) for i in order}
    read = nvml.constant("NVML_P2P_CAPS_INDEX_READ", 0)
    links, p2p, notes = [], [], []
    for a in order:
        row_l, row_p = [], []
        for b in order:
            if a == b:
                row_l.append("X")
                row_p.append("X")
                continue
            word = _link_word(nv[a], nv[b], pcis[a], pcis[b], gpu_pcis)
            if word is None:
                level, why = nvml._call("nvmlDeviceGetTopologyCommonAncestor", every[a], every[b])
                word = LEVELS.get(level, "?") if not why else "?"
                if why and a < b:
                    notes.append(f"GPU {a}-{b}: PCIe path not readable ({why})")
            status, why = nvml._call("nvmlDeviceGetP2PStatus", every[a], every[b], read)
            row_l.append(word)
            row_p.append("U" if why else P2P_WORDS.get(status, "U"))
            if why and a < b:
                notes.append(f"GPU {a}-{b}: peer-to-peer status not readable ({why})")
        links.append(row_l)
        p2p.append(row_p)
    return {"gpus": order, "links": links, "p2p": p2p, "notes": notes}, None


def topology_record(indices: tuple[int, ...] | None = None) -> dict[str, Any]:
    """``{"topology": ..., "topology_note": ...}``: the matrix, or null and why (run.json, the
    CLI)."""
    topo, why = topology(indices)
    return {"topology": topo, "topology_note": why}


def _fields(h: Any, ids: list[tuple[int, int]]) -> tuple[list[float], float] | None:
    """The values of field ``ids`` (``(fieldId, scopeId)``) of one GPU and their timestamp in µs,
    or None where the call or any value fails (NVML_ERROR_NOT_SUPPORTED and friends)."""
    got, why = nvml._call("nvmlDeviceGetFieldValues", h, ids)
    if why or not got or any(int(v.nvmlReturn) != 0 for v in got):
        return None
    return [float(v.value.ullVal) for v in got], float(got[0].timestamp) or time.time() * 1e6


class LinkMeter:
    """Per GPU, PCIe and NVLink throughput for the sampler's ``sys/`` values, and what the driver
    would not give, as notes."""

    def __init__(self) -> None:
        # (GPU, "pcie"/"nvlink") -> (rx, tx, µs): the last counter reading, in bytes
        self._last: dict[tuple[int, str], tuple[float, float, float]] = {}
        self._notes: dict[tuple[int, str], str] = {}

    def sample(self, indices: tuple[int, ...]) -> dict[str, float]:
        values: dict[str, float] = {}
        for i in indices:
            h = nvml._query("nvmlDeviceGetHandleByIndex", i)
            if h is not None:
                values.update(self._pcie(i, h))
                values.update(self._nvlink(i, h))
        return values

    def _rate(self, i: int, link: str, rx: float, tx: float, at: float) -> dict[str, float]:
        """MiB/s since the last reading of byte counters ``rx``/``tx`` (none on the first)."""
        last, self._last[(i, link)] = self._last.get((i, link)), (rx, tx, at)
        if last is None or at <= last[2]:
            return {}
        per_s = 1e6 / (at - last[2]) / _MIB  # bytes per µs-span -> MiB/s
        return {
            tags.sys_gpu(i, f"{link}_rx_mib_s"): round(max(0.0, rx - last[0]) * per_s, 3),
            tags.sys_gpu(i, f"{link}_tx_mib_s"): round(max(0.0, tx - last[1]) * per_s, 3),
        }

    def _pcie(self, i: int, h: Any) -> dict[str, float]:
        ids = [
            (nvml.constant("NVML_FI_DEV_PCIE_COUNT_RX_BYTES", 198), 0),
            (nvml.constant("NVML_FI_DEV_PCIE_COUNT_TX_BYTES", 197), 0),
        ]
        counters = _fields(h, ids)
        if counters is not None:
            (rx, tx), at = counters
            return self._rate(i, "pcie", rx, tx, at)
        out = {}
        for key, name in (("rx", "NVML_PCIE_UTIL_RX_BYTES"), ("tx", "NVML_PCIE_UTIL_TX_BYTES")):
            kib, why = nvml._call("nvmlDeviceGetPcieThroughput", h, nvml.constant(name, 0))
            if why:
                self._notes[(i, "pcie")] = f"GPU {i}: PCIe throughput {why}"
            else:
                self._notes[(i, "pcie")] = (
                    f"GPU {i}: PCIe is NVML's 20 ms snapshot (no byte counters)"
                )
                out[tags.sys_gpu(i, f"pcie_{key}_mib_s")] = round(float(kib) / _KIB, 3)
        return out

    def _nvlink(self, i: int, h: Any) -> dict[str, float]:
        ids = [
            (nvml.constant("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", 139), _ALL_LINKS),
            (nvml.constant("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", 138), _ALL_LINKS),
        ]
        got = _fields(h, ids)
        if got is not None:
            (rx, tx), at = got
            return self._rate(i, "nvlink", rx * _KIB, tx * _KIB, at)
        summed = self._nvlink_bytes(h)
        if summed is None:
            self._notes[(i, "nvlink")] = f"GPU {i}: NVLink throughput not supported"
            return {}
        return self._rate(i, "nvlink", *summed)

    def _nvlink_bytes(self, h: Any) -> tuple[float, float, float] | None:
        """(received, sent bytes, µs) summed over the links whose byte counters NVML gives."""
        rcv = nvml.constant("NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES", 204)
        xmit = nvml.constant("NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES", 202)
        rx = tx = 0.0
        at, found = 0.0, False
        for link in range(nvml.constant("NVML_NVLINK_MAX_LINKS", 18)):
            got = _fields(h, [(rcv, link), (xmit, link)])
            if got is not None:
                (r, t), at = got
                rx, tx, found = rx + r, tx + t, True
        return (rx, tx, at) if found else None

    def note(self) -> str | None:
        """What the driver did not give, in one line (None: everything was read)."""
        return "; ".join(self._notes[k] for k in sorted(self._notes)) or None
