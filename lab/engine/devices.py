"""The one gateway to NVML (nvidia-ml-py) and the machine's CPU view.

Every NVML call goes through ``_query``, which initialises NVML lazily and
turns "not supported" into None, nvitop-style. ``snapshot()`` reads every
device once into immutable records; pages and the supervisor never call NVML
themselves. Without a driver the snapshot has no GPUs, a CPU view (psutil)
and one reason string. GPU processes are matched to runs by process ancestry
against the pids recorded in the runs' status.json files.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import psutil

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
class CpuRecord:
    cores: int
    util_pct: float
    per_core_pct: tuple[float, ...]
    mem_used_mib: float
    mem_total_mib: float


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


def _run_pids(runs_root: Path | None) -> dict[int, str]:
    """pid -> run_id for every pid recorded by a live-looking run."""
    from lab.runfolder import HAS_PROCESSES, read_json, runs_dir

    root = Path(runs_root) if runs_root else runs_dir()
    out: dict[int, str] = {}
    try:
        entries = list(os.scandir(root))
    except OSError:
        return out
    for e in entries:
        if e.name.startswith(".") or not e.is_dir():
            continue
        st = read_json(Path(e.path) / "status.json")
        if not st or st.get("state") not in HAS_PROCESSES:
            continue
        for key in ("supervisor_pid", "pid"):
            if st.get(key):
                out[int(st[key])] = e.name
        for pid, _ct in st.get("tree") or []:
            out[int(pid)] = e.name
    return out


def _owner(pid: int, run_pids: dict[int, str]) -> str | None:
    """The run whose recorded pid is ``pid`` or one of its ancestors."""
    try:
        p: psutil.Process | None = psutil.Process(pid)
        while p is not None:
            if p.pid in run_pids:
                return run_pids[p.pid]
            p = p.parent()
    except psutil.Error:  # vanished between NVML's list and our walk: normal
        return None
    return None


def _processes(handle: Any, run_pids: dict[int, str]) -> tuple[GpuProcess, ...]:
    seen: dict[int, GpuProcess] = {}
    for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        for p in _query(fn, handle, default=[]) or []:
            used = getattr(p, "usedGpuMemory", None)
            used_mib = None if used is None else round(used / _MIB, 1)
            if p.pid not in seen:
                seen[p.pid] = GpuProcess(int(p.pid), used_mib, _owner(int(p.pid), run_pids))
    return tuple(seen.values())


def _gpu(i: int, run_pids: dict[int, str] | None) -> GpuRecord | None:
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
        processes=_processes(h, run_pids) if run_pids is not None else (),
    )


def read_gpus(indices: tuple[int, ...] | None = None, runs_root: Path | None = None,
              with_processes: bool = True) -> tuple[GpuRecord, ...]:
    """Read the GPUs (all, or physical ``indices``) once; empty without NVML."""
    n = gpu_count()
    wanted = range(n) if indices is None else [i for i in indices if 0 <= i < n]
    run_pids = _run_pids(runs_root) if with_processes else None
    return tuple(g for g in (_gpu(i, run_pids) for i in wanted) if g is not None)


def cpu_record() -> CpuRecord:
    """Cores, utilisation since the last call, and memory, from psutil."""
    # psutil measures since the previous call; too recent a previous call gives noise
    wait = 0.2 if time.monotonic() - _state.get("cpu_read", 0.0) < 0.1 else None
    per = tuple(float(x) for x in psutil.cpu_percent(interval=wait, percpu=True))
    _state["cpu_read"] = time.monotonic()
    vm = psutil.virtual_memory()
    return CpuRecord(
        cores=psutil.cpu_count() or 1,
        util_pct=round(sum(per) / len(per), 1) if per else 0.0,
        per_core_pct=per,
        mem_used_mib=round((vm.total - vm.available) / _MIB, 1),
        mem_total_mib=round(vm.total / _MIB, 1),
    )


def snapshot(runs_root: Path | None = None) -> DeviceSnapshot:
    """Every device read once: GPUs (with the runs holding them), the CPU, and why there are no GPUs."""
    reason = _init()
    gpus = () if reason else read_gpus(runs_root=runs_root)
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


def describe_machine(snap: DeviceSnapshot) -> str:
    """A short line for run.json's ``recorded_on``."""
    import socket

    host = socket.gethostname()
    if snap.gpus:
        names = sorted({g.name for g in snap.gpus})
        return f"{len(snap.gpus)}x {', '.join(names)} (nccl), {host}, {snap.cpu.cores} cores"
    return f"CPU (gloo), {host}, {snap.cpu.cores} cores"


psutil.cpu_percent(interval=None, percpu=True)  # prime: the first reading is meaningless
_state["cpu_read"] = time.monotonic()
