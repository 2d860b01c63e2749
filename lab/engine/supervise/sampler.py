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
Step = sample number, wall time = sample time.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from lab import tags
from lab.engine import procs
from lab.engine.devices import links
from lab.engine.devices import nvml as devices
from lab.engine.devices.interference import InterferenceMeter
from lab.engine.devices.sm_activity import SmActivity
from lab.engine.scalars import ScalarWriter
from lab.engine.supervise.diskfull import is_full
from lab.runfolder import SYS_DIR

log = logging.getLogger(__name__)


class SysSampler:
    """Samples the run's GPUs and process tree into ``RUN_DIR/sys``."""

    def __init__(self, run_dir: Path, gpus: tuple[int, ...]) -> None:
        self.gpus = tuple(gpus)
        self.step = 0
        self._writer: ScalarWriter | None = ScalarWriter(Path(run_dir) / SYS_DIR)
        self._meter = procs.TreeMeter()
        self._others = InterferenceMeter()
        self._links = links.LinkMeter()
        self._sm = SmActivity()

    def sample(self, tree: list[procs.Process]) -> dict[str, float]:
        """Read everything once, write one event, return the values written."""
        now = time.time()
        values: dict[str, float] = {}
        # with their processes: whose are they?
        gpus = devices.read_gpus(self.gpus) if self.gpus else ()
        for g in gpus:
            for key, v in (
                ("util_pct", g.util_pct),
                ("mem_used_mib", g.mem_used_mib),
                ("power_w", g.power_w),
                ("temp_c", g.temp_c),
            ):
                if v is not None:
                    values[tags.sys_gpu(g.index, key)] = v
            if (sm := self._sm.read(g.index)) is not None:  # GPM: from the second sample on
                values[tags.sys_gpu(g.index, tags.SM_ACTIVE)] = sm
        values[tags.SYS_CPU_PCT], values[tags.SYS_RSS_MIB] = self._meter.read(tree)
        values.update(self._others.sample(tree, gpus))
        values.update(self._links.sample(tuple(g.index for g in gpus)))
        self._write(values, now)
        self.step += 1
        return values

    def _write(self, values: dict[str, float], now: float) -> None:
        """One event; on a full disk the sampling goes on without writing (logged once)."""
        if self._writer is None:
            return
        try:
            self._writer.add(values, self.step, now)
            self._writer.flush()
        except OSError as e:
            if not is_full(e):
                raise
            log.warning("disk full: no more sys/ events for this run (%s)", e)
            self._writer = None

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
            if self._writer is not None:
                self._writer.close()
        except Exception as e:  # closing must not turn a finished run into a crash
            log.warning("closing sys events failed: %s", e)
