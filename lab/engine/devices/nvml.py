"""The one gateway to NVML (nvidia-ml-py).

Every NVML call goes through ``_call``, which initialises NVML lazily and turns
every failure of one query, NVML's or not (pynvml 13.x raises
``NVMLLibraryMismatchError`` on older drivers), into None plus a reason,
nvitop-style: no exception leaves this module. ``snapshot()`` reads every
device once into immutable records; pages and the supervisor never call NVML.
Without a driver the snapshot has no GPUs, the CPU view (``lab.engine.procs``)
and one reason. What cannot be shown is said: a GPU NVML will not open is left
out and named in ``notes`` (only ``usable_indices`` can be chosen), a refused
process list is ``processes_note``, MIG mode a note on its GPU. The run of a
GPU process is asked of ``owner(pid)`` (``registry.process_owner``); a pid not
visible here (a container sees NVML's host pids) goes to the one run that
chose that GPU (``gpu_users``), and says so. No run folders here.
``process_utilization`` asks NVML how busy each process kept a GPU, for the
supervisor's interference record; "cannot attribute" is None, not an error.
The links between GPUs (topology, PCIe and NVLink traffic) are read in
``lab.engine.devices.links`` through ``_call``/``_query`` and ``constant``.
The sentences said about a snapshot are in ``lab.engine.devices.notes``. Test
seam: ``LAB_NVML_MODULE`` names a module to import instead of ``pynvml``
(tests/fake_nvml.py).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from lab.engine.procs import CpuRecord, cpu_record, visible

log = logging.getLogger(__name__)

NVML_MODULE_ENV = "LAB_NVML_MODULE"  # test seam only: a module to use in place of pynvml
NO_DRIVER = "no NVIDIA driver found: runs use the CPU with the gloo backend"
NOT_PERMITTED = "process list not permitted"
_MIB = 1024 * 1024


try:  # the module is named pynvml; nvidia-ml-py provides it
    pynvml: Any = importlib.import_module(os.environ.get(NVML_MODULE_ENV) or "pynvml")
except ImportError:  # pragma: no cover - nvidia-ml-py is in requirements.txt
    pynvml = None
_lock = threading.Lock()
_state: dict[str, Any] = {"module": None, "ok": False, "reason": None}


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_mib: float | None
    run_id: str | None
    visible: bool = True  # False: no such pid here (a host pid seen from a container, or it ended)


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
    # why the process list is unknown (None: it was read, maybe empty)
    processes_note: str | None = None
    mig: bool = False
    notes: tuple[str, ...] = ()  # what the lab cannot show of this GPU


@dataclass(frozen=True)
class DeviceSnapshot:
    gpus: tuple[GpuRecord, ...]
    cpu: CpuRecord
    reason: str | None
    taken_at: float
    notes: tuple[str, ...] = ()  # machine-wide: GPUs NVML counts but would not let us read


def _init() -> str | None:
    """Initialise NVML once (again if the module was swapped, as tests do); return a reason when
    unusable."""
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
            gone = any(
                k in type(e).__name__
                for k in ("LibraryNotFound", "DriverNotLoaded", "NoPermission")
            )
            _state["reason"] = (
                NO_DRIVER
                if gone
                else f"NVML did not start ({e}): runs use the CPU with the gloo backend"
            )
            log.info("NVML unavailable: %s", e)
        return _state["reason"]


def _why(e: Exception) -> str:
    """A failed query's reason in a few words."""
    name = type(e).__name__
    if "NotSupported" in name:
        return "not supported"
    if "NoPermission" in name:
        return "not permitted"
    if "LibraryMismatch" in name or "FunctionNotFound" in name or isinstance(e, AttributeError):
        return "the driver is older than nvidia-ml-py"
    return f"{name}: {e}"


def _call(fn: str, *args: Any) -> tuple[Any, str | None]:
    """``(value, None)``, or ``(None, reason)`` for any failure of this one query: never an
    exception."""
    if (reason := _init()) is not None:
        return None, reason
    try:
        return getattr(pynvml, fn)(*args), None
    except Exception as e:
        why = _why(e)
        if why != "not supported":
            log.debug("NVML %s failed: %s", fn, e)
        return None, why


def _query(fn: str, *args: Any, default: Any = None) -> Any:
    value, why = _call(fn, *args)  # the reason is dropped: a missing metric is just None
    return default if why else value


def constant(name: str, default: int) -> int:
    """One of NVML's constants (``NVML_TOPOLOGY_NODE``, ...), ``default`` where the bindings lack
    it; a value the bindings wrote as a one-element tuple (``NVML_P2P_CAPS_INDEX_READ = 0,``) is
    its element."""
    v = getattr(pynvml, name, default)
    return int(v[0] if isinstance(v, tuple) else v)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def gpu_count() -> int:
    """How many GPUs NVML counts (0 without a driver), readable or not: see ``usable_indices``."""
    return int(_query("nvmlDeviceGetCount", default=0) or 0)


def usable_indices() -> tuple[int, ...]:
    """The physical indices of the GPUs NVML lets us read: the only ones a run may choose."""
    return tuple(g.index for g in read_gpus(with_processes=False))


def uuids(indices: tuple[int, ...]) -> dict[int, str]:
    """Physical index -> UUID (``GPU-…``, ``MIG-…``) of those GPUs NVML names: what
    CUDA_VISIBLE_DEVICES takes."""
    out: dict[int, str] = {}
    for i in indices:
        h = _query("nvmlDeviceGetHandleByIndex", i)
        u = None if h is None else _query("nvmlDeviceGetUUID", h)
        if u:
            out[i] = _text(u)
    return out


def driver_version() -> str | None:
    """The NVIDIA driver version NVML reports (None without a driver)."""
    v = _query("nvmlSystemGetDriverVersion")
    return None if v is None else _text(v)


def cuda_driver_version() -> tuple[int, int] | None:
    """The newest CUDA version the driver supports, e.g. (12, 4) (None without a driver)."""
    v = _query("nvmlSystemGetCudaDriverVersion")  # 12040 means 12.4
    return None if v is None else (int(v) // 1000, int(v) % 1000 // 10)


Owner = Callable[[int], str | None]  # pid -> the run it belongs to (None: not a run's)
GpuUsers = Callable[[int], tuple[str, ...]]  # physical GPU index -> the live runs that chose it


def _listed(handle: Any, fn: str) -> tuple[list[Any], str | None]:
    """One NVML process list; an older driver gets the versioned call pynvml's own error names."""
    got, why = _call(fn, handle)
    if why == "the driver is older than nvidia-ml-py":
        got, why = _call(fn + "_v2", handle)
    return list(got or []), why


def _processes(
    handle: Any, index: int, owner: Owner | None, gpu_users: GpuUsers | None
) -> tuple[tuple[GpuProcess, ...], str | None]:
    seen: dict[int, GpuProcess] = {}
    refused: list[str] = []
    for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        listed, why = _listed(handle, fn)
        if why and why != "not supported":
            refused.append(why)
        for p in listed:
            pid, used = int(p.pid), getattr(p, "usedGpuMemory", None)
            if pid not in seen:
                seen[pid] = _process(
                    pid, None if used is None else round(used / _MIB, 1), index, owner, gpu_users
                )
    if refused and not seen:
        note = NOT_PERMITTED if "not permitted" in refused else f"process list n/a ({refused[0]})"
        return (), note
    return tuple(seen.values()), None


def _process(
    pid: int, used_mib: float | None, index: int, owner: Owner | None, gpu_users: GpuUsers | None
) -> GpuProcess:
    if visible(pid):
        return GpuProcess(pid, used_mib, owner(pid) if owner else None)
    # NVML gives host pids and the driver knows no pid namespaces: inside a container this pid
    # is nobody here, so the only link to a run is the GPU it chose (unique, or no claim)
    users = gpu_users(index) if gpu_users else ()
    return GpuProcess(pid, used_mib, users[0] if len(users) == 1 else None, visible=False)


def _temperature(h: Any) -> Any:
    sensor = getattr(pynvml, "NVML_TEMPERATURE_GPU", 0)
    value, why = _call("nvmlDeviceGetTemperatureV", h, sensor)
    # the deprecated call is all an old driver has
    if why == "the driver is older than nvidia-ml-py":
        value = _query("nvmlDeviceGetTemperature", h, sensor)
    return value


def _mig_notes(h: Any) -> tuple[bool, tuple[str, ...]]:
    mode = _query("nvmlDeviceGetMigMode", h)
    if not mode or mode[0] != getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1):
        return False, ()
    return True, (
        "MIG mode is on: NVML gives no utilisation or process list for the whole GPU, and a run "
        "on it "
        "gets one MIG instance, not the GPU; the lab shows the GPU's memory only",
    )


def _gpu(
    i: int, owner: Owner | None, with_processes: bool, gpu_users: GpuUsers | None
) -> GpuRecord | None:
    h = _query("nvmlDeviceGetHandleByIndex", i)
    if h is None:
        return None
    util = _query("nvmlDeviceGetUtilizationRates", h)
    mem = _query("nvmlDeviceGetMemoryInfo", h)
    power = _query("nvmlDeviceGetPowerUsage", h)
    temp = _temperature(h)
    mig, notes = _mig_notes(h)
    processes, note = _processes(h, i, owner, gpu_users) if with_processes else ((), None)
    return GpuRecord(
        index=i,
        name=_text(_query("nvmlDeviceGetName", h, default="unknown GPU")),
        uuid=_text(_query("nvmlDeviceGetUUID", h, default="")),
        util_pct=None if util is None else float(util.gpu),
        mem_used_mib=None if mem is None else round(mem.used / _MIB, 1),
        mem_total_mib=None if mem is None else round(mem.total / _MIB, 1),
        power_w=None if power is None else power / 1000.0,
        temp_c=None if temp is None else float(temp),
        processes=processes,
        processes_note=note,
        mig=mig,
        notes=notes,
    )


def read_gpus(
    indices: tuple[int, ...] | None = None,
    owner: Owner | None = None,
    with_processes: bool = True,
    gpu_users: GpuUsers | None = None,
) -> tuple[GpuRecord, ...]:
    """Read the GPUs (all, or physical ``indices``) once; empty without NVML; one NVML refuses is
    left out.

    ``owner(pid)`` names a GPU process's run, ``gpu_users(index)`` the runs that chose a GPU (for
    pids not visible here); without them ``run_id`` is None."""
    n = gpu_count()
    wanted = range(n) if indices is None else [i for i in indices if 0 <= i < n]
    return tuple(
        g for g in (_gpu(i, owner, with_processes, gpu_users) for i in wanted) if g is not None
    )


def compute_capability(index: int) -> tuple[int, int] | None:
    """GPU ``index``'s CUDA compute capability ``(major, minor)``, None where NVML cannot say."""
    h = _query("nvmlDeviceGetHandleByIndex", index)
    cc = None if h is None else _query("nvmlDeviceGetCudaComputeCapability", h)
    return None if cc is None else (int(cc[0]), int(cc[1]))


def process_utilization(index: int, since_us: int = 0) -> tuple[dict[int, float], int] | None:
    """``({pid: SM utilisation %}, newest sample time)`` of GPU ``index`` from NVML's samples after
    ``since_us``.

    Several samples of one process are averaged. No sample since then is an
    empty dict (nobody computed). None where NVML cannot attribute
    utilisation to processes (not supported, no permission, no driver).
    """
    h = _query("nvmlDeviceGetHandleByIndex", index)
    if h is None:
        return None
    samples, why = _call("nvmlDeviceGetProcessUtilization", h, int(since_us))
    if why is not None:
        # NotFound, or pynvml's "error" with code 0 (NVML_SUCCESS) for an empty list: no samples
        if "NotFound" in why or why.endswith("Success"):
            return {}, int(since_us)
        log.debug("NVML cannot attribute utilisation on GPU %s: %s", index, why)
        return None
    per: dict[int, list[float]] = {}
    newest = int(since_us)
    for smp in samples or []:
        per.setdefault(int(smp.pid), []).append(float(smp.smUtil))
        newest = max(newest, int(smp.timeStamp))
    return {pid: sum(v) / len(v) for pid, v in per.items()}, newest


def snapshot(owner: Owner | None = None, gpu_users: GpuUsers | None = None) -> DeviceSnapshot:
    """Every device read once: GPUs (see ``read_gpus``), the CPU, why there are no GPUs, what cannot
    be read."""
    reason = _init()
    gpus = () if reason else read_gpus(owner=owner, gpu_users=gpu_users)
    missing = [] if reason else sorted(set(range(gpu_count())) - {g.index for g in gpus})
    notes = tuple(
        f"GPU {i}: NVML would not open it (no permission, or the GPU is lost): not shown, cannot "
        "be chosen"
        for i in missing
    )
    if not reason and not gpus:
        reason = "NVML sees no GPUs it can read: runs use the CPU with the gloo backend"
    return DeviceSnapshot(
        gpus=gpus, cpu=cpu_record(), reason=reason, taken_at=time.time(), notes=notes
    )
