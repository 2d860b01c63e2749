"""A fake ``pynvml`` module for the GPU path of lab/engine/devices/nvml.py (this machine has no
GPU).

FAKE: only NVIDIA GPUs are faked, nothing else. ``FakeNvml(gpus, cuda_driver=13000)``
exposes the NVML functions devices.py calls (the driver's CUDA version in
NVML's encoding among them), with the same error classes as
nvidia-ml-py 13.x (``NVMLError``, ``NVMLError_NotSupported``,
``NVMLError_NoPermission``, ``NVMLError_FunctionNotFound``, and
``NVMLLibraryMismatchError``, which is *not* an ``NVMLError``). A ``FakeGpu``
models what real machines do to the lab: metrics that are not supported,
calls refused for want of permission (``no_permission={"handle"}`` drops a
GPU from what can be read, leaving a non-contiguous set of indices;
``{"processes"}`` is a MIG parent's process list for a non-root user), a
driver older than the bindings (``old_driver``: the unversioned process-list
calls raise ``NVMLLibraryMismatchError`` as pynvml's
``throwOnVersionMismatch`` does, and ``nvmlDeviceGetTemperatureV`` is not
found), MIG mode, and processes, including pids that do not exist here (a
process that vanished, or a host pid seen from inside a container), and
per-process utilisation samples (``nvmlDeviceGetProcessUtilization``).

The test seam of ``lab.engine.devices.nvml``: with ``LAB_NVML_MODULE=tests.fake_nvml``
in the environment, devices.py imports this module instead of ``pynvml``, in
every process (the supervisor and the CLI too), and the module answers as a
``FakeNvml`` of ``LAB_TEST_FAKE_GPUS`` plain GPUs (0 when unset, no driver
for ``none``). tests/conftest.py
sets it when ``LAB_TEST_FAKE_GPUS`` is set (scripts/test.sh's second pass).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_TEMPERATURE_GPU = 0
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 18
NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1
NVML_TOPOLOGY_HOSTBRIDGE, NVML_TOPOLOGY_SYSTEM = 30, 50
NVML_P2P_CAPS_INDEX_READ = (0,)  # sic: nvidia-ml-py writes it as a one-element tuple
NVML_P2P_STATUS_OK, NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 0, 3
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 138, 139
NVML_FI_DEV_PCIE_COUNT_TX_BYTES, NVML_FI_DEV_PCIE_COUNT_RX_BYTES = 197, 198
NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES, NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES = 202, 204
NVML_ERROR_NOT_SUPPORTED = 3
NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE = 0, 1
FAKE_GPUS_ENV = "LAB_TEST_FAKE_GPUS"
_MIB = 1024 * 1024


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_NoPermission(NVMLError):
    pass


class NVMLError_FunctionNotFound(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLLibraryMismatchError(Exception):  # pynvml 13.x: deliberately not an NVMLError
    pass


class NVMLError_NotFound(NVMLError):
    pass


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-0000"
    util: int = 50
    mem_used_mib: int = 1024
    mem_total_mib: int = 81559
    power_mw: int = 250_000
    temp: int = 60
    unsupported: set[str] = field(default_factory=set)  # e.g. {"power", "temp"}
    no_permission: set[str] = field(default_factory=set)  # "handle", "processes", or any metric
    old_driver: bool = False
    mig: bool = False
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, used MiB or None)
    # per-process samples (pid, SM %, timestamp in µs), as nvmlDeviceGetProcessUtilization returns
    # them;
    # "process_util" in ``unsupported`` makes that call fail as on GPUs that cannot attribute
    process_util: list[tuple[int, int, int]] = field(default_factory=list)
    # the links (lab.engine.devices.links): NVLinks by the peer's index and their count, the PCIe
    # path by the peer's index (NVML_TOPOLOGY_*; SYSTEM where not named), peer-to-peer status by the
    # peer's index (NVML_P2P_STATUS_*; OK where not named), PCIe throughput in KB/s and NVLink data
    # rates in KiB/s, which advance NVML's counters with the clock. ``unsupported`` takes "nvlink"
    # (no NVLink at all), "topology", "p2p", "pcie", "pcie_counters" (no PCIe byte counters: the
    # 20 ms snapshot only), "nvlink_counters" (no per-link NVLink byte counters) and
    # "nvlink_throughput" (the field values come
    # back with NVML_ERROR_NOT_SUPPORTED, as from a driver without those counters).
    nvlinks: dict[int, int] = field(default_factory=dict)
    levels: dict[int, int] = field(default_factory=dict)
    p2p: dict[int, int] = field(default_factory=dict)
    pcie_rx_kb_s: int = 0
    pcie_tx_kb_s: int = 0
    nvlink_rx_kib_s: int = 0
    nvlink_tx_kib_s: int = 0
    # SM activity in % between two GPM samples (NVML_GPM_METRIC_SM_UTIL); "gpm" in ``unsupported``:
    # a GPU before Hopper, whose nvmlGpmQueryDeviceSupport says isSupportedDevice 0
    sm_active: float = 40.0
    compute_capability: tuple[int, int] = (9, 0)  # an H100; (7, 0) a V100, (7, 5) a T4


class FakeNvml:
    """Instances stand in for the ``pynvml`` module."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLLibraryMismatchError = NVMLLibraryMismatchError
    NVMLError_NotFound = NVMLError_NotFound
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE
    NVML_FEATURE_ENABLED = NVML_FEATURE_ENABLED
    NVML_NVLINK_MAX_LINKS = NVML_NVLINK_MAX_LINKS
    NVML_PCIE_UTIL_TX_BYTES = NVML_PCIE_UTIL_TX_BYTES
    NVML_PCIE_UTIL_RX_BYTES = NVML_PCIE_UTIL_RX_BYTES
    NVML_P2P_CAPS_INDEX_READ = NVML_P2P_CAPS_INDEX_READ
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
    NVML_FI_DEV_PCIE_COUNT_TX_BYTES = NVML_FI_DEV_PCIE_COUNT_TX_BYTES
    NVML_FI_DEV_PCIE_COUNT_RX_BYTES = NVML_FI_DEV_PCIE_COUNT_RX_BYTES
    NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES = NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES
    NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES = NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES

    def __init__(
        self, gpus: list[FakeGpu], no_driver: bool = False, cuda_driver: int = 13000
    ) -> None:
        self.gpus = gpus
        self.no_driver = no_driver
        # NVML's encoding: 1000 * major + 10 * minor (12040 is CUDA 12.4)
        self.cuda_driver = cuda_driver
        self.init_calls = 0
        self.calls: list[str] = []

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.no_driver:
            raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda_driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:
        if not 0 <= i < len(self.gpus):
            raise NVMLError("Invalid Argument")  # NVML's NVMLError_InvalidArgument
        self._need(self.gpus[i], "handle")
        return self.gpus[i]

    def _need(self, g: FakeGpu, what: str) -> None:
        self.calls.append(what)
        if what in g.no_permission:
            raise NVMLError_NoPermission("Insufficient Permissions")
        if what in g.unsupported:
            raise NVMLError_NotSupported("Not Supported")

    def nvmlDeviceGetName(self, g: FakeGpu) -> str:
        return g.name

    def nvmlDeviceGetUUID(self, g: FakeGpu) -> str:
        self._need(g, "uuid")
        return g.uuid

    def nvmlDeviceGetCudaComputeCapability(self, g: FakeGpu) -> tuple[int, int]:
        self._need(g, "compute_capability")
        return g.compute_capability

    def nvmlDeviceGetUtilizationRates(self, g: FakeGpu):
        self._need(g, "util")
        if g.mig:  # a MIG parent has no utilisation of its own
            raise NVMLError_NotSupported("Not Supported")
        return SimpleNamespace(gpu=g.util, memory=10)

    def nvmlDeviceGetMemoryInfo(self, g: FakeGpu):
        self._need(g, "mem")
        return SimpleNamespace(
            used=g.mem_used_mib * _MIB,
            total=g.mem_total_mib * _MIB,
            free=(g.mem_total_mib - g.mem_used_mib) * _MIB,
        )

    def nvmlDeviceGetPowerUsage(self, g: FakeGpu) -> int:
        self._need(g, "power")
        return g.power_mw

    def nvmlDeviceGetTemperatureV(self, g: FakeGpu, sensor: int) -> int:
        self._need(g, "temp")
        if g.old_driver:
            raise NVMLError_FunctionNotFound("Function Not Found")
        return g.temp

    def nvmlDeviceGetTemperature(self, g: FakeGpu, sensor: int) -> int:  # deprecated in pynvml 13
        self._need(g, "temp_deprecated")
        return g.temp

    def nvmlDeviceGetMigMode(self, g: FakeGpu) -> list[int]:
        self._need(g, "mig")
        mode = NVML_DEVICE_MIG_ENABLE if g.mig else NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def _process_list(self, g: FakeGpu, versioned: bool):
        if g.old_driver and not versioned:
            raise NVMLLibraryMismatchError(
                "Unversioned function called and the pyNVML version does not match "
                "the NVML lib version."
            )
        self._need(g, "processes")
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=None if mib is None else mib * _MIB)
            for pid, mib in g.processes
        ]

    def nvmlDeviceGetComputeRunningProcesses(self, g: FakeGpu):
        return self._process_list(g, versioned=False)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, g: FakeGpu):
        return self._process_list(g, versioned=True)

    def nvmlDeviceGetProcessUtilization(self, g: FakeGpu, last_seen_us: int):
        self._need(g, "process_util")
        found = [
            SimpleNamespace(pid=pid, smUtil=sm, memUtil=0, encUtil=0, decUtil=0, timeStamp=ts)
            for pid, sm, ts in g.process_util
            if ts > last_seen_us
        ]
        if not found:
            raise NVMLError_NotFound("Not Found")  # what NVML says when no sample is newer
        return found

    def nvmlDeviceGetGraphicsRunningProcesses(self, g: FakeGpu):
        if g.old_driver:
            raise NVMLLibraryMismatchError("Unversioned function called")
        raise NVMLError_NotSupported("Not Supported")

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, g: FakeGpu):
        raise NVMLError_NotSupported("Not Supported")

    # ---- the links -------------------------------------------------------------------------

    def _index(self, g: FakeGpu) -> int:
        return next(i for i, x in enumerate(self.gpus) if x is g)

    def nvmlDeviceGetPciInfo(self, g: FakeGpu):
        return SimpleNamespace(domain=0, bus=0x10 + self._index(g), device=0)

    def _links(self, g: FakeGpu) -> list[int]:
        """The peer at the far end of each of ``g``'s NVLinks, in link order."""
        return [peer for peer, n in sorted(g.nvlinks.items()) for _ in range(n)]

    def nvmlDeviceGetNvLinkState(self, g: FakeGpu, link: int) -> int:
        self._need(g, "nvlink")
        if not 0 <= link < NVML_NVLINK_MAX_LINKS:
            raise NVMLError("Invalid Argument")
        return NVML_FEATURE_ENABLED if link < len(self._links(g)) else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, g: FakeGpu, link: int):
        self._need(g, "nvlink")
        return self.nvmlDeviceGetPciInfo(self.gpus[self._links(g)[link]])

    def nvmlDeviceGetTopologyCommonAncestor(self, a: FakeGpu, b: FakeGpu) -> int:
        self._need(a, "topology")
        return a.levels.get(self._index(b), NVML_TOPOLOGY_SYSTEM)

    def nvmlDeviceGetP2PStatus(self, a: FakeGpu, b: FakeGpu, index: int) -> int:
        self._need(a, "p2p")
        if not isinstance(index, int):  # ctypes would refuse the bindings' tuple
            raise TypeError(f"p2pIndex {index!r} is not an int")
        return a.p2p.get(self._index(b), NVML_P2P_STATUS_OK)

    def nvmlDeviceGetPcieThroughput(self, g: FakeGpu, counter: int) -> int:
        self._need(g, "pcie")
        return g.pcie_rx_kb_s if counter == NVML_PCIE_UTIL_RX_BYTES else g.pcie_tx_kb_s

    # GPM (lab.engine.devices.sm_activity): samples are allocated, taken, compared and freed
    class c_nvmlGpmMetricsGet_t:  # noqa: N801 (pynvml's name)
        def __init__(self) -> None:
            self.version = self.numMetrics = 0
            self.sample1 = self.sample2 = None
            self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(4)]

    def nvmlGpmQueryDeviceSupport(self, g: FakeGpu):
        self.calls.append("gpm_support")
        return SimpleNamespace(version=1, isSupportedDevice=int("gpm" not in g.unsupported))

    def nvmlGpmSampleAlloc(self):
        self.gpm_live = getattr(self, "gpm_live", 0) + 1
        return SimpleNamespace(value=None)

    def nvmlGpmSampleGet(self, g: FakeGpu, sample):
        self._need(g, "gpm")
        sample.value = g.sm_active
        return sample

    def nvmlGpmMetricsGet(self, request):
        assert request.version == 1 and request.metrics[0].metricId == 2  # SM_UTIL
        request.metrics[0].value = request.sample2.value
        return request

    def nvmlGpmSampleFree(self, sample) -> None:
        self.gpm_live -= 1

    def nvmlDeviceGetFieldValues(self, g: FakeGpu, field_ids: list):
        now_us = int(time.time() * 1e6)
        off = set(g.unsupported)
        thr_off = "nvlink_throughput" in off
        per_link = max(1, sum(g.nvlinks.values()))
        # field -> (rate in KiB/s, bytes a unit of the counter, unsupported?)
        rates = {
            NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: (g.nvlink_rx_kib_s, 1, thr_off),
            NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: (g.nvlink_tx_kib_s, 1, thr_off),
            NVML_FI_DEV_PCIE_COUNT_RX_BYTES: (
                g.pcie_rx_kb_s,
                1024,
                off & {"pcie", "pcie_counters"},
            ),
            NVML_FI_DEV_PCIE_COUNT_TX_BYTES: (
                g.pcie_tx_kb_s,
                1024,
                off & {"pcie", "pcie_counters"},
            ),
            NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES: (
                g.nvlink_rx_kib_s / per_link,
                1024,
                "nvlink_counters" in off,
            ),
            NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES: (
                g.nvlink_tx_kib_s / per_link,
                1024,
                "nvlink_counters" in off,
            ),
        }
        out = []
        for fid in field_ids:
            fid, scope = fid if isinstance(fid, tuple) else (fid, 0)
            rate, unit, bad = rates.get(fid, (0, 1, True))
            if fid in (NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES, NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES):
                bad = bad or scope >= sum(g.nvlinks.values())  # a per-link counter: link ids
            counter = int(rate * unit * (now_us - _EPOCH_US) / 1e6)  # since "boot"
            out.append(
                SimpleNamespace(
                    fieldId=fid,
                    nvmlReturn=NVML_ERROR_NOT_SUPPORTED if bad else 0,
                    timestamp=now_us,
                    value=SimpleNamespace(ullVal=0 if bad else counter),
                )
            )
        return out


_EPOCH_US = int(time.time() * 1e6)


def fake_gpus(n: int) -> list[FakeGpu]:
    """``n`` plain fake GPUs with distinct UUIDs, as the ``LAB_TEST_FAKE_GPUS`` mode has.

    Their links: GPUs 0-1 and 2-3 (and so on) are NVLink pairs of 2 links; other pairs of the same
    parity meet at a PCIe host bridge (PHB), the rest across the sockets (SYS), where peer-to-peer
    is not supported (TNS). GPU i takes in 100(i+1) MiB/s over PCIe and sends half that; the pairs
    send 1 GiB/s over NVLink, except that the last pair's driver gives no NVLink counters and the
    last GPU no PCIe throughput: notes, not errors."""
    gpus = []
    for i in range(n):
        others = [j for j in range(n) if j != i]
        gpus.append(
            FakeGpu(
                uuid=f"GPU-fa4e0000-0000-0000-0000-{i:012d}",
                util=0,
                mem_used_mib=0,
                nvlinks={j: 2 for j in others if j // 2 == i // 2},
                levels={j: NVML_TOPOLOGY_HOSTBRIDGE for j in others if j % 2 == i % 2},
                p2p={
                    j: NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
                    for j in others
                    if j // 2 != i // 2 and j % 2 != i % 2
                },
                pcie_rx_kb_s=100 * 1024 * (i + 1),
                pcie_tx_kb_s=50 * 1024 * (i + 1),
                nvlink_rx_kib_s=1024 * 1024 if i ^ 1 < n else 0,
                nvlink_tx_kib_s=1024 * 1024 if i ^ 1 < n else 0,
                unsupported=(
                    ({"pcie"} if i == n - 1 else set())
                    | ({"pcie_counters"} if n > 2 and i == n - 2 else set())
                    | ({"nvlink_throughput"} if n > 2 and i // 2 == (n - 1) // 2 else set())
                    | ({"nvlink_counters"} if n > 2 and i == n - 1 else set())
                ),
            )
        )
    return gpus


_from_env: list[FakeNvml] = []


def __getattr__(name: str) -> Any:
    """As a module named by ``LAB_NVML_MODULE``: the NVML functions of ``LAB_TEST_FAKE_GPUS`` fake
    GPUs."""
    if name.startswith("__"):
        raise AttributeError(name)
    if not _from_env:  # "none": a machine without the NVIDIA driver
        n = os.environ.get(FAKE_GPUS_ENV) or "0"
        _from_env.append(
            FakeNvml([], no_driver=True) if n == "none" else FakeNvml(fake_gpus(int(n)))
        )
    return getattr(_from_env[0], name)
