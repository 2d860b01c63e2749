"""The one gateway to NVML (nvidia-ml-py).

Every NVML call goes through ``_query``, which initialises NVML lazily and
turns "not supported" into None, nvitop-style. ``snapshot()`` reads every
device once into immutable records; pages and the supervisor never call NVML
themselves. Without a driver the snapshot has no GPUs, the CPU view (from
``lab.engine.procs``) and one reason string. Which run holds a GPU process is
asked of an ``owner`` callable the caller passes (``registry.process_owner``):
this module knows nothing of run folders. Tested by tests/test_devices.py.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from lab.engine.procs import CpuRecord, cpu_record

try:  # the module is named pynvml; nvidia-ml-py provides it
    import pynvml
except ImportError:  # pragma: no cover - nvidia-ml-py is in requirements.txt
    pynvml = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

NO_DRIVER = "no NVIDIA driver found: runs use the CPU with the gloo backend"
_MIB = 1024 * 1024

_lock = threading.Lock()
_state: dict[str, Any] = {"module": None, "ok": False, "reason": None}


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_mib: float | None
    run_id: str | None


@dataclass(frozen=True)
class GpuRecord:
    index: int
    name: str
    uuid: str
    util_pct: float | None
    mem_used_mib: float | None
    mem_total_mib: float | None
    power_w: float | None
    temp_c: float | None
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class DeviceSnapshot:
    gpus: tuple[GpuRecord, ...]
    cpu: CpuRecord
    reason: str | None
    taken_at: float


def _init() -> str | None:
    """Initialise NVML once (again if the module was swapped, as tests do); return a reason when unusable."""
    with _lock:
        if _state["module"] is pynvml and (_state["ok"] or _state["reason"]):
            return _state["reason"]
        _state.update(module=pynvml, ok=False, reason=None)
        if pynvml is None:
            _state["reason"] = NO_DRIVER
            return NO_DRIVER
        try:
            pynvml.nvmlInit()
            _state["ok"] = True
        except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            name = type(e).__name__
            if "LibraryNotFound" in name or "DriverNotLoaded" in name or "NoPermission" in name:
                _state["reason"] = NO_DRIVER
            else:
                _state["reason"] = f"NVML did not start ({e}): runs use the CPU with the gloo backend"
            log.info("NVML unavailable: %s", e)
        return _state["reason"]


def _query(fn: str | Callable[..., Any], *args: Any, default: Any = None) -> Any:
    """Call an NVML function; "not supported" and other per-call NVML errors give ``default``."""
    if _init() is not None:
        return default
    func = getattr(pynvml, fn) if isinstance(fn, str) else fn
    try:
        return func(*args)
    except Exception as e:
        if pynvml is not None and isinstance(e, getattr(pynvml, "NVMLError", ())):
            if not isinstance(e, getattr(pynvml, "NVMLError_NotSupported", ())):
                log.debug("NVML %s failed: %s", fn, e)
            return default
        raise


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def gpu_count() -> int:
    """How many GPUs NVML sees (0 without a driver)."""
    return int(_query("nvmlDeviceGetCount", default=0) or 0)


def driver_version() -> str | None:
    """The NVIDIA driver version NVML reports (None without a driver)."""
    v = _query("nvmlSystemGetDriverVersion")
    return None if v is None else _text(v)


def cuda_driver_version() -> tuple[int, int] | None:
    """The newest CUDA version the driver supports, e.g. (12, 4) (None without a driver)."""
    v = _query("nvmlSystemGetCudaDriverVersion")  # 12040 means 12.4
    return None if v is None else (int(v) // 1000, int(v) % 1000 // 10)


Owner = Callable[[int], str | None]  # pid -> the run it belongs to (None: not a run's)


def _processes(handle: Any, owner: Owner | None) -> tuple[GpuProcess, ...]:
    seen: dict[int, GpuProcess] = {}
    for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        for p in _query(fn, handle, default=[]) or []:
            used = getattr(p, "usedGpuMemory", None)
            used_mib = None if used is None else round(used / _MIB, 1)
            if p.pid not in seen:
                seen[p.pid] = GpuProcess(int(p.pid), used_mib, owner(int(p.pid)) if owner else None)
    return tuple(seen.values())


def _gpu(i: int, owner: Owner | None, with_processes: bool) -> GpuRecord | None:
    h = _query("nvmlDeviceGetHandleByIndex", i)
    if h is None:
        return None
    util = _query("nvmlDeviceGetUtilizationRates", h)
    mem = _query("nvmlDeviceGetMemoryInfo", h)
    power = _query("nvmlDeviceGetPowerUsage", h)
    temp = _query("nvmlDeviceGetTemperature", h, getattr(pynvml, "NVML_TEMPERATURE_GPU", 0))
    return GpuRecord(
        index=i,
        name=_text(_query("nvmlDeviceGetName", h, default="unknown GPU")),
        uuid=_text(_query("nvmlDeviceGetUUID", h, default="")),
        util_pct=None if util is None else float(util.gpu),
        mem_used_mib=None if mem is None else round(mem.used / _MIB, 1),
        mem_total_mib=None if mem is None else round(mem.total / _MIB, 1),
        power_w=None if power is None else power / 1000.0,
        temp_c=None if temp is None else float(temp),
        processes=_processes(h, owner) if with_processes else (),
    )


def read_gpus(indices: tuple[int, ...] | None = None, owner: Owner | None = None,
              with_processes: bool = True) -> tuple[GpuRecord, ...]:
    """Read the GPUs (all, or physical ``indices``) once; empty without NVML.

    ``owner(pid)`` names the run a GPU process belongs to; without it every
    process's ``run_id`` is None.
    """
    n = gpu_count()
    wanted = range(n) if indices is None else [i for i in indices if 0 <= i < n]
    return tuple(g for g in (_gpu(i, owner, with_processes) for i in wanted) if g is not None)


def snapshot(owner: Owner | None = None) -> DeviceSnapshot:
    """Every device read once: GPUs (with the runs holding them, see ``read_gpus``), the CPU, and why there are no GPUs."""
    reason = _init()
    gpus = () if reason else read_gpus(owner=owner)
    if not reason and not gpus:
        reason = "NVML sees no GPUs: runs use the CPU with the gloo backend"
    return DeviceSnapshot(gpus=gpus, cpu=cpu_record(), reason=reason, taken_at=time.time())


def holders(snap: DeviceSnapshot) -> list[str]:
    """One sentence per (run, GPU): e.g. "run X holds 3.1 GiB on GPU 1"."""
    out = []
    for g in snap.gpus:
        per_run: dict[str, float] = {}
        for p in g.processes:
            name = f"run {p.run_id}" if p.run_id else f"process {p.pid} (not a run)"
            per_run[name] = per_run.get(name, 0.0) + (p.used_mib or 0.0)
        for name, mib in per_run.items():
            out.append(f"{name} holds {mib / 1024:.1f} GiB on GPU {g.index}")
    return out


def describe_machine(gpus: tuple[GpuRecord, ...], cores: int) -> str:
    """A short line for run.json's ``recorded_on``: the GPUs (or the CPU), the backend, host and cores."""
    import socket

    host = socket.gethostname()
    if gpus:
        names = ", ".join(sorted({g.name for g in gpus}))
        return f"{len(gpus)}x {names} (nccl), {host}, {cores} cores"
    return f"CPU (gloo), {host}, {cores} cores"
