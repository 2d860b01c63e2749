"""A run's charts: its training curves from ``tb/`` and its device timelines from ``sys/``.

Owns which charts a run has and what they are called: loss, accuracy and
throughput and the gradient norm against the optimizer step (``train_charts``), and the device
samples the supervisor took over time (``sys_traces``): per-GPU utilisation,
memory and power, one trace per physical GPU, or, on a run without GPU
samples, the CPU use and resident memory of the run's whole process tree.
The Live page draws one run's device charts (``sys_charts``); the Compare
page and its export draw the same traces run by run
(``lab.views.compare.curves.system_panels``). Series are anything with numpy
``step``, ``wall_time``, ``value`` (``lab.events.Series``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from lab import tags
from lab.views.runscalars import SYS_PREFIX
from lab.views.text import ChartSpec

_GPU_TAG = re.compile(r"^sys/gpu(\d+)/([a-z_]+)$")  # the leaf: one of SYS_METRICS' (or temp_c)
CPU_TRACE = "cpu (process tree)"  # the trace of a run without GPU samples


@dataclass(frozen=True)
class SysMetric:
    """One kind of device sample: its GPU tag leaf, its CPU stand-in, and how charts name both."""

    label: str  # "utilisation": the Compare page's choice and axis
    leaf: str  # sys/gpu<i>/<leaf>
    gpu_title: str
    unit: str
    # GPU charts only: CPU use can exceed 100 % of one core
    y_range: tuple[float, float] | None = None
    cpu_tag: str | None = None
    cpu_title: str | None = None
    cpu_unit: str | None = None
    cpu_what: str | None = None  # what the CPU stand-in measures, for notes


SYS_METRICS = {
    "util": SysMetric(
        "utilisation",
        "util_pct",
        "GPU utilisation",
        "%",
        (0.0, 100.0),
        tags.SYS_CPU_PCT,
        "CPU use of the run's processes",
        "% of one core",
        "CPU use of the run's whole process tree; 100 % = one core",
    ),
    "mem": SysMetric(
        "memory",
        "mem_used_mib",
        "GPU memory used",
        "MiB",
        None,
        tags.SYS_RSS_MIB,
        "Memory (RSS) of the run's processes",
        "MiB",
        "resident memory of the run's whole process tree",
    ),
    "power": SysMetric("power", "power_w", "GPU power", "W"),
    # the links' traffic (lab.engine.devices.links): DP's GPU 0 intake against DDP's even traffic
    "pcie_rx": SysMetric("PCIe receive", "pcie_rx_mib_s", "GPU PCIe receive", "MiB/s"),
    "pcie_tx": SysMetric("PCIe transmit", "pcie_tx_mib_s", "GPU PCIe transmit", "MiB/s"),
    "nvlink_rx": SysMetric("NVLink receive", "nvlink_rx_mib_s", "GPU NVLink receive", "MiB/s"),
    "nvlink_tx": SysMetric("NVLink transmit", "nvlink_tx_mib_s", "GPU NVLink transmit", "MiB/s"),
}
CPU_NOTE = (
    "No GPU samples: this run used the CPU, so these charts show its processes' CPU and memory."
)

_TRAIN_CHARTS = (
    ("Loss", "loss", (tags.TRAIN_LOSS, tags.VAL_LOSS)),
    ("Accuracy", "accuracy", (tags.TRAIN_ACC, tags.VAL_ACC)),
    ("Throughput", "samples/s", (tags.SAMPLES_PER_SEC,)),
    # spikes: the health finding
    ("Gradient norm", "norm", (tags.GRAD_NORM, tags.GRAD_NORM_WARNING)),
)


def train_charts(tb: Mapping[str, Any]) -> list[ChartSpec]:
    """Loss, accuracy, throughput and the gradient norm (with the warned spikes) against the step,
    from ``tb/``.

    A chart appears only when at least one of its tags has points. x is the step as read (int),
    y the values as read: the figure converts only the points it draws.
    """
    specs = []
    for title, y_title, names in _TRAIN_CHARTS:
        traces = [
            (t, np.asarray(tb[t].step), np.asarray(tb[t].value, dtype=float))
            for t in names
            if t in tb and len(tb[t].value)
        ]
        if traces:
            specs.append(ChartSpec(title, "step", y_title, traces))
    return specs


def sys_traces(
    scalars: Mapping[str, Any], metric: str
) -> tuple[list[tuple[str, np.ndarray, np.ndarray]], bool]:
    """One run's samples of ``metric`` (a key of ``SYS_METRICS``) as ``(traces, on_cpu)``.

    One trace per GPU (``gpu0``, ``gpu1``..., in index order); without GPU
    samples of it, the metric's CPU stand-in and ``on_cpu`` True. x is
    seconds since the run's first sample of any kind; tags outside ``sys/``
    are ignored, so a run's merged scalars can be passed as they are.
    """
    m = SYS_METRICS[metric]
    samples = {t: s for t, s in scalars.items() if t.startswith(SYS_PREFIX) and len(s.value)}
    if not samples:
        return [], False
    t0 = min(float(np.asarray(s.wall_time)[0]) for s in samples.values())

    def trace(name: str, s: Any) -> tuple[str, np.ndarray, np.ndarray]:
        return name, np.asarray(s.wall_time, dtype=float) - t0, np.asarray(s.value, dtype=float)

    gpus = sorted(
        (int(g.group(1)), t) for t in samples if (g := _GPU_TAG.match(t)) and g.group(2) == m.leaf
    )
    if gpus:
        return [trace(f"gpu{i}", samples[t]) for i, t in gpus], False
    if m.cpu_tag in samples:
        return [trace(CPU_TRACE, samples[m.cpu_tag])], True
    return [], False


def sys_charts(sysd: Mapping[str, Any]) -> tuple[list[ChartSpec], str | None]:
    """A run's device charts over time, and a note when they show the CPU.

    Per-GPU utilisation (0-100 %), memory and power; on a CPU run, the CPU
    use and RSS of the run's process tree.
    """
    specs: list[ChartSpec] = []
    on_cpu = False
    for metric, m in SYS_METRICS.items():
        traces, cpu = sys_traces(sysd, metric)
        if not traces:
            continue
        on_cpu |= cpu
        if cpu:
            specs.append(
                ChartSpec(m.cpu_title or m.label, "time (s)", m.cpu_unit or m.unit, traces)
            )
        else:
            specs.append(ChartSpec(m.gpu_title, "time (s)", m.unit, traces, m.y_range))
    return specs, CPU_NOTE if on_cpu else None
