"""What the lab says about a device snapshot, in sentences: who holds which GPU, what cannot be
shown, the machine.

Pure formatting of ``lab.engine.devices.nvml`` records (no NVML call here): used
by pre-flight, the CLI, the pages and run.json's ``recorded_on``.
"""

from __future__ import annotations

import socket

from lab.engine.devices.nvml import DeviceSnapshot, GpuProcess, GpuRecord


def holders(snap: DeviceSnapshot, indices: tuple[int, ...] | None = None) -> list[str]:
    """One sentence per (run, GPU) of all GPUs or ``indices``: e.g. "run X holds 3.1 GiB on GPU
    1"."""
    out = []
    for g in snap.gpus:
        per_run: dict[str, float] = {}
        for p in g.processes if indices is None or g.index in indices else ():
            per_run[_holder(p)] = per_run.get(_holder(p), 0.0) + (p.used_mib or 0.0)
        out += [
            f"{name} holds {mib / 1024:.1f} GiB on GPU {g.index}" for name, mib in per_run.items()
        ]
    return out


def limits(snap: DeviceSnapshot, indices: tuple[int, ...] | None = None) -> list[str]:
    """What the lab cannot show, one sentence each: unreadable GPUs, refused process lists, MIG
    mode."""
    out = list(getattr(snap, "notes", ())) if indices is None else []
    for g in snap.gpus:  # getattr: pre-flight is also given records shaped like ours
        if indices is None or g.index in indices:
            if getattr(g, "processes_note", None):
                out.append(
                    f"GPU {g.index}: {g.processes_note}, so which processes use it is unknown"
                )
            out += [f"GPU {g.index}: {n}" for n in getattr(g, "notes", ())]
    return out


def _holder(p: GpuProcess) -> str:
    if p.run_id:
        return (
            f"run {p.run_id}"
            if p.visible
            else f"run {p.run_id} (by the GPU it chose: pid {p.pid} is not visible here)"
        )
    if not p.visible:
        return f"process {p.pid} (not visible here: another container's or the host's, or it ended)"
    return f"process {p.pid} (not a run)"


def describe_machine(gpus: tuple[GpuRecord, ...], cores: int) -> str:
    """A short line for run.json's ``recorded_on``: the GPUs (or the CPU), the backend, host and
    cores."""
    host = socket.gethostname()
    if gpus:
        names = ", ".join(sorted({g.name for g in gpus}))
        return f"{len(gpus)}x {names} (nccl), {host}, {cores} cores"
    return f"CPU (gloo), {host}, {cores} cores"
