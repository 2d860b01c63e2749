"""SM activity per GPU from NVML's GPU Performance Monitoring (GPM, Hopper and newer): the share of
the SMs that were busy between two GPM samples (``NVML_GPM_METRIC_SM_UTIL``). Utilisation
(``nvmlDeviceGetUtilizationRates``) is kernel-active time, which NCCL's spinning kernels read as
100%; SM activity tells a GPU that computes from one that waits in a collective. A GPU without GPM
gives None, asked once: the sampler then writes no ``sm_active_pct`` and Compare judges by
utilisation.
"""

from __future__ import annotations

import logging
from typing import Any

from lab.engine.devices import nvml

log = logging.getLogger(__name__)

SM_UTIL = 2  # NVML_GPM_METRIC_SM_UTIL: "Percentage of SMs that were busy. 0.0 - 100.0"


class SmActivity:
    """One GPM sample kept per GPU; ``read(index)`` takes the next and gives the SM activity since
    the last (None the first time, and always where GPM is not supported or refused)."""

    def __init__(self) -> None:
        self._last: dict[int, Any] = {}
        self._off: set[int] = set()

    def read(self, index: int) -> float | None:
        if index in self._off:
            return None
        h = nvml._query("nvmlDeviceGetHandleByIndex", index)
        if h is None:
            return None
        if index not in self._last and not self._supported(index, h):
            self._off.add(index)
            return None
        sample, why = nvml._call("nvmlGpmSampleAlloc")
        if sample is not None:
            why = nvml._call("nvmlGpmSampleGet", h, sample)[1]
        if sample is None or why is not None:
            log.debug("GPM sample of GPU %s failed: %s", index, why)
            self._free(sample)
            return None
        previous, self._last[index] = self._last.get(index), sample
        if previous is None:
            return None
        try:
            return self._sm_util(previous, sample)
        finally:
            self._free(previous)

    def _supported(self, index: int, h: Any) -> bool:
        support, why = nvml._call("nvmlGpmQueryDeviceSupport", h)
        ok = support is not None and bool(getattr(support, "isSupportedDevice", 0))
        if not ok:
            log.debug("GPU %s has no GPM metrics (%s): utilisation only", index, why)
        return ok

    def _sm_util(self, first: Any, second: Any) -> float | None:
        module = nvml.pynvml
        request = module.c_nvmlGpmMetricsGet_t()
        request.version = nvml.constant("NVML_GPM_METRICS_GET_VERSION", 1)
        request.numMetrics = 1
        request.sample1, request.sample2 = first, second
        request.metrics[0].metricId = nvml.constant("NVML_GPM_METRIC_SM_UTIL", SM_UTIL)
        got, why = nvml._call("nvmlGpmMetricsGet", request)
        metric = None if got is None else got.metrics[0]
        if metric is None or int(metric.nvmlReturn) != 0:
            log.debug("GPM SM activity not read: %s", why or getattr(metric, "nvmlReturn", None))
            return None
        return round(float(metric.value), 1)

    @staticmethod
    def _free(sample: Any) -> None:
        if sample is not None:
            nvml._call("nvmlGpmSampleFree", sample)

    def close(self) -> None:
        """Free the samples kept (NVML allocates them)."""
        for sample in self._last.values():
            self._free(sample)
        self._last.clear()
