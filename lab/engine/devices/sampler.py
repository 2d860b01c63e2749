"""The one device sampler: GPUs read once per sample through the NVML gateway (``nvml``), written
with the sample's other values as one scalar event (``lab.engine.scalars``), step = sample
number, wall time = sample time.

Two kinds extend it: a run's on this machine (``lab.engine.supervise.sampler.SysSampler``, in the
supervisor's watch loop: ``sys/gpu<i>/...`` with the run's process tree, what else used the
machine and the GPU links) and a Slurm node's (``lab.engine.slurm.node_sampler.NodeSampler``, a
program of its own on each node, in ``every``'s loop: ``sys/node<k>/gpu<i>/...`` with the node's
CPU and memory). Each says what else it reads (``extra``) and how a write that fails is taken
(``write_failed``); the reading of the GPUs, the event and the loop are here once.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable

from lab.engine.devices import nvml
from lab.engine.scalars import ScalarWriter

log = logging.getLogger(__name__)

GPU_KEYS = ("util_pct", "mem_used_mib", "power_w", "temp_c")  # each sampled GPU's tags' leaves


class DeviceSampler:
    """Samples ``gpus`` (physical indices) into ``logdir``, each GPU's values under
    ``gpu_tag(index, leaf)``."""

    with_processes = True  # whose processes are on the GPUs (a node's sampler does not ask)

    def __init__(
        self, logdir: Path, gpus: tuple[int, ...], gpu_tag: Callable[[int, str], str]
    ) -> None:
        self.gpus = tuple(gpus)
        self.gpu_tag = gpu_tag
        self.step = 0
        self._writer: ScalarWriter | None = ScalarWriter(Path(logdir))

    def read_gpus(self) -> tuple[nvml.GpuRecord, ...]:
        return nvml.read_gpus(self.gpus, with_processes=self.with_processes) if self.gpus else ()

    def gpu_values(self, gpus: tuple[nvml.GpuRecord, ...]) -> dict[str, float]:
        values: dict[str, float] = {}
        for g in gpus:
            for key in GPU_KEYS:
                v = getattr(g, key)
                if v is not None:
                    values[self.gpu_tag(g.index, key)] = v
        return values

    def extra(self, gpus: tuple[nvml.GpuRecord, ...], *args) -> dict[str, float]:
        """What else this kind reads in one sample (``args``: what its caller gives, a run's
        process tree)."""
        return {}

    def sample(self, *args) -> dict[str, float]:
        """Read everything once, write one event, return the values written."""
        now = time.time()
        gpus = self.read_gpus()
        values = self.gpu_values(gpus)
        values.update(self.extra(gpus, *args))
        self._write(values, now)
        self.step += 1
        return values

    def _write(self, values: dict[str, float], now: float) -> None:
        if self._writer is None:
            return
        try:
            self._writer.add(values, self.step, now)
            self._writer.flush()
        except OSError as e:
            if not self.write_failed(e):
                raise
            self._writer = None

    def write_failed(self, e: OSError) -> bool:
        """Whether sampling goes on without writing after ``e`` (else it is raised)."""
        return False

    def every(self, interval_s: float, stopped: Callable[[], bool]) -> None:
        """Sample every ``interval_s`` until ``stopped()`` (looked at every 0.1 s), then close."""
        try:
            while not stopped():
                try:
                    self.sample()
                except Exception as e:  # a sampling hiccup must never end the sampler
                    log.warning("sampling failed: %s", e)
                deadline = time.monotonic() + interval_s
                while not stopped() and time.monotonic() < deadline:
                    time.sleep(0.1)
        finally:
            self.close()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
