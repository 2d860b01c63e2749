"""Which memory a run's ``memory_creep`` is judged on (``lab.engine.health.creep`` judges one
series; this picks the series), in this order of trust:

1. the trainer's own ``mem/<device>/allocated_mib`` (what its tensors hold: not the allocator's
   reserve, NCCL's lazy buffers or other tenants);
2. else the watch's own samples of each GPU's memory held by the run (NVML's per-process memory of
   the run's processes, else used memory less other tenants'): the RSS of a GPU run also holds
   CUDA's host side, which grows for reasons of its own;
3. else the process tree's RSS (a run on the CPU);
4. else, where nothing samples the run here (a Slurm job watched from a login node), the GPU
   memory each of its nodes' samplers wrote (``sys/node<k>/gpu<i>/mem_used_mib``; a job's GPUs are
   its own). A node's host memory is never judged: other jobs share it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from lab import tags
from lab.engine.health import creep
from lab.runfolder import SYS_DIR

Series = list[tuple[float, float]]  # (epoch seconds, MiB)


class RunMemory:
    """The memory samples of one watched run, and the series its creep is judged on."""

    def __init__(self, run_dir: Path) -> None:
        self.sys_dir = Path(run_dir) / SYS_DIR
        self.samples: dict[str, Series] = {}  # tag -> the watch's own samples
        self._nodes: dict[str, Any] = {}
        self._reader: Any = None

    def note(self, values: dict[str, float]) -> None:
        """Keep one sample of the watch's sampler: each GPU's memory held by the run and the
        process tree's RSS."""
        now = time.time()
        for tag, v in values.items():
            if tag == tags.SYS_RSS_MIB or (
                tag.startswith(tags.SYS_GPU) and tag.endswith("/mem_used_mib")
            ):
                other = values.get(tag.replace("/mem_used_mib", "/other_mem_mib"), 0.0) or 0.0
                own = values.get(tag.replace("/mem_used_mib", "/run_mem_mib"))  # per process
                pts = self.samples.setdefault(tag, [])
                pts.append((now, float(own) if own is not None else float(v) - float(other)))
                self.samples[tag] = creep.thin(pts)

    def read_nodes(self) -> None:
        """Re-read the nodes' samples (``RUN_DIR/sys/node<k>/``), where the watch has none."""
        if self.samples or not any(p.name.startswith("node") for p in _subdirs(self.sys_dir)):
            return
        from lab.events import LogdirReader  # here: only a watched Slurm job pays for it

        self._reader = self._reader or LogdirReader(str(self.sys_dir))
        self._reader.refresh()
        self._nodes = {
            tag: s
            for name in self._reader.run_names()
            for tag, s in self._reader.scalars(name).items()
            if tag.startswith(tags.SYS_NODE) and tag.endswith("/mem_used_mib")
        }

    def series(self, scalars: dict[str, Any]) -> dict[str, Series]:
        """The series to judge, given the run's scalars (``tag -> series``) as last read."""
        allocated = {
            tag: _walls(s)
            for tag, s in scalars.items()
            if tag.startswith(tags.MEM) and tag.endswith("/allocated_mib")
        }
        gpus = {t: p for t, p in self.samples.items() if t.startswith(tags.SYS_GPU)}
        return (
            allocated
            or gpus
            or {t: p for t, p in self.samples.items() if t == tags.SYS_RSS_MIB}
            or {t: _walls(s) for t, s in self._nodes.items()}
        )


def _walls(series: Any) -> Series:
    """A series as (wall seconds, value), thinned to what a watch keeps (``creep.thin``)."""
    walls, vals = np.asarray(series.wall_time, dtype=float), np.asarray(series.value)
    return creep.thin([(float(w), float(v)) for w, v in zip(walls, vals)])


def _subdirs(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if p.is_dir()]
    except OSError:
        return []
