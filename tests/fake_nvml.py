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
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_TEMPERATURE_GPU = 0
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


def fake_gpus(n: int) -> list[FakeGpu]:
    """``n`` plain fake GPUs with distinct UUIDs, as the ``LAB_TEST_FAKE_GPUS`` mode has."""
    return [
        FakeGpu(uuid=f"GPU-fa4e0000-0000-0000-0000-{i:012d}", util=0, mem_used_mib=0)
        for i in range(n)
    ]


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
