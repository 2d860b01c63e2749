"""The device strip of the home page: one row per GPU (or one for the CPU), computed without a
browser.

Each row has a label, utilisation and memory as 0..1 fractions for the
progress bars, their text, and a line of extras (temperature, power, the
runs holding the GPU, or what cannot be seen: a process list NVML would not
give, MIG mode). Reads a ``lab.engine.devices.nvml.DeviceSnapshot`` (or
anything shaped like it); never calls NVML itself.
"""

from __future__ import annotations

from typing import Any

from lab.views.text import fmt_mib


def device_rows(snapshot: Any) -> list[dict[str, Any]]:
    """One row per GPU for the device strip: label, util and memory fractions, text.

    Without GPUs, one row for the CPU (total utilisation and host memory).
    """
    rows = [_gpu_row(g) for g in getattr(snapshot, "gpus", ()) or ()]
    if rows:
        return rows
    cpu = getattr(snapshot, "cpu", None)
    return [] if cpu is None else [_cpu_row(cpu)]


def _fraction(v: float | None) -> float | None:
    return None if v is None else min(1.0, max(0.0, v))


def _gpu_row(g: Any) -> dict[str, Any]:
    util = g.util_pct
    total, used = g.mem_total_mib, g.mem_used_mib
    return {
        "label": f"GPU {g.index} · {g.name}",
        "util": None if util is None else _fraction(util / 100),
        "util_text": "util n/a" if util is None else f"util {util:.0f}%",
        "mem": _fraction(used / total) if (used is not None and total) else None,
        "mem_text": f"memory {fmt_mib(used)} / {fmt_mib(total)}",
        "extra": _gpu_extra(g),
    }


def _cpu_row(cpu: Any) -> dict[str, Any]:
    util, used, total, cores = (
        _attr_num(cpu, n) for n in ("util_pct", "mem_used_mib", "mem_total_mib", "cores")
    )
    return {
        "label": "CPU" + (f" · {int(cores)} cores" if cores else ""),
        "util": None if util is None else min(1.0, util / 100),
        "util_text": "util n/a" if util is None else f"util {util:.0f}%",
        "mem": (used / total) if (used is not None and total) else None,
        "mem_text": f"memory {fmt_mib(used)} / {fmt_mib(total)}",
        "extra": "",
    }


def _attr_num(obj: Any, name: str) -> float | None:
    v = getattr(obj, name, None)  # a field the sampler could not read is None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _gpu_extra(g: Any) -> str:
    bits = []
    if g.temp_c is not None:
        bits.append(f"{g.temp_c:.0f} °C")
    if g.power_w is not None:
        bits.append(f"{g.power_w:.0f} W")
    procs = getattr(g, "processes", ()) or ()
    runs = sorted({p.run_id for p in procs if getattr(p, "run_id", None)})
    if runs:
        bits.append("runs: " + ", ".join(runs))
    elif procs:
        bits.append(f"{len(procs)} process(es)")
    if getattr(g, "processes_note", None):  # unknown is not the same as empty
        bits.append(g.processes_note)
    if getattr(g, "mig", False):
        bits.append("MIG mode")
    return " · ".join(bits)
