"""A fake ``pynvml`` module for the GPU path of lab/engine/devices.py (this machine has no GPU).

FAKE: only NVIDIA GPUs are faked, nothing else. ``FakeNvml(gpus, cuda_driver=13000)``
exposes the handful of NVML functions devices.py calls (the driver's CUDA
version in NVML's encoding among them), with the same error classes
(``NVMLError``, ``NVMLError_NotSupported``). A GPU can declare metrics as
unsupported, and processes, including pids that do not exist (a process that
vanished between NVML's list and our psutil walk).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

NVML_TEMPERATURE_GPU = 0
_MIB = 1024 * 1024


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
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
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, used MiB or None)


class FakeNvml:
    """Instances stand in for the ``pynvml`` module."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU

    def __init__(self, gpus: list[FakeGpu], no_driver: bool = False, cuda_driver: int = 13000) -> None:
        self.gpus = gpus
        self.no_driver = no_driver
        self.cuda_driver = cuda_driver  # NVML's encoding: 1000 * major + 10 * minor (12040 is CUDA 12.4)
        self.init_calls = 0

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.no_driver:
            raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda_driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:
        return self.gpus[i]

    def _need(self, g: FakeGpu, what: str) -> None:
        if what in g.unsupported:
            raise NVMLError_NotSupported("Not Supported")

    def nvmlDeviceGetName(self, g: FakeGpu) -> str:
        return g.name

    def nvmlDeviceGetUUID(self, g: FakeGpu) -> str:
        return g.uuid

    def nvmlDeviceGetUtilizationRates(self, g: FakeGpu):
        self._need(g, "util")
        return SimpleNamespace(gpu=g.util, memory=10)

    def nvmlDeviceGetMemoryInfo(self, g: FakeGpu):
        self._need(g, "mem")
        return SimpleNamespace(used=g.mem_used_mib * _MIB, total=g.mem_total_mib * _MIB,
                               free=(g.mem_total_mib - g.mem_used_mib) * _MIB)

    def nvmlDeviceGetPowerUsage(self, g: FakeGpu) -> int:
        self._need(g, "power")
        return g.power_mw

    def nvmlDeviceGetTemperature(self, g: FakeGpu, sensor: int) -> int:
        self._need(g, "temp")
        return g.temp

    def nvmlDeviceGetComputeRunningProcesses(self, g: FakeGpu):
        self._need(g, "processes")
        return [SimpleNamespace(pid=pid, usedGpuMemory=None if mib is None else mib * _MIB)
                for pid, mib in g.processes]

    def nvmlDeviceGetGraphicsRunningProcesses(self, g: FakeGpu):
        raise NVMLError_NotSupported("Not Supported")
