"""The supervisor's device sampler: ``sys/`` scalars as TensorBoard events.

Once per interval the supervisor calls ``SysSampler.sample(tree)``: the run's
GPUs are read through ``lab.engine.devices.nvml`` and the run's whole process tree
through ``lab.engine.procs.TreeMeter`` (CPU percent summed over processes, RSS
summed), what else used the machine through ``lab.engine.devices.interference``
(``sys/other_cpu_pct``, ``sys/gpu<i>/other_*``; ``interference()`` is
status.json's record; ``train_processes()``, the most processes of the tree training at once,
status.json's ``train_processes``), the link traffic of the run's GPUs through
``lab.engine.devices.links`` (``sys/gpu<i>/pcie_{rx,tx}_mib_s``, ``nvlink_{rx,tx}_mib_s``; what the
driver does not give is the record's ``link_note``), and each value is written as a scalar event
under ``RUN_DIR/sys``; on a full disk the events stop (one warning in the log), the run goes on.
The events are written by ``lab.engine.scalars.ScalarWriter`` (tensorboard's own writer, never
torch).
The GPUs, the event and its step (sample number) are the one device sampler's
(``lab.engine.devices.sampler``), which a Slurm node's sampler extends too.
"""

from __future__ import annotations

import logging
from pathlib import Path

from lab import tags
from lab.engine import procs
from lab.engine.devices import links
from lab.engine.devices.interference import InterferenceMeter
from lab.engine.devices.nvml import GpuRecord
from lab.engine.devices.sampler import DeviceSampler
from lab.engine.devices.sm_activity import SmActivity
from lab.engine.supervise.diskfull import is_full
from lab.runfolder import SYS_DIR

log = logging.getLogger(__name__)


class SysSampler(DeviceSampler):
    """Samples the run's GPUs and process tree into ``RUN_DIR/sys``."""

    def __init__(self, run_dir: Path, gpus: tuple[int, ...]) -> None:
        super().__init__(Path(run_dir) / SYS_DIR, gpus, tags.sys_gpu)
        self._meter = procs.TreeMeter()
        self._others = InterferenceMeter()
        self._links = links.LinkMeter()
        self._sm = SmActivity()

    def sample(self, tree: list[procs.Process]) -> dict[str, float]:
        """Read everything once, write one event, return the values written."""
        return super().sample(tree)

    def extra(self, gpus: tuple[GpuRecord, ...], *args) -> dict[str, float]:
        """SM activity (GPM: from the second sample on), the tree's CPU and memory, what else used
        the machine (``gpus`` with their processes: whose are they?) and the GPU links."""
        (tree,) = args
        values: dict[str, float] = {}
        for g in gpus:
            if (sm := self._sm.read(g.index)) is not None:
                values[tags.sys_gpu(g.index, tags.SM_ACTIVE)] = sm
        values[tags.SYS_CPU_PCT], values[tags.SYS_RSS_MIB] = self._meter.read(tree)
        values.update(self._others.sample(tree, gpus))
        values.update(self._links.sample(tuple(g.index for g in gpus)))
        return values

    def write_failed(self, e: OSError) -> bool:
        """On a full disk the sampling goes on without writing (logged once)."""
        if is_full(e):
            log.warning("disk full: no more sys/ events for this run (%s)", e)
        return is_full(e)

    def interference(self) -> dict:
        """status.json's ``interference`` record of the samples so far, with ``link_note``: the
        link traffic the driver did not give (None: all of it was read, or the run has no GPU)."""
        return {**self._others.record(), "link_note": self._links.note()}

    def train_processes(self) -> int:
        """status.json's ``train_processes``: the most processes of the run's tree that trained at
        once in one interval (``interference.OtherCpu``); several under single placement: the
        script starts its own DDP, as Lightning does."""
        return self._others.train_processes

    def close(self) -> None:
        self._sm.close()
        try:
            super().close()
        except Exception as e:  # closing must not turn a finished run into a crash
            log.warning("closing sys events failed: %s", e)
