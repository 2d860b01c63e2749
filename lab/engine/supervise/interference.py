"""What else used the machine while a run ran: status.json's ``interference`` and its ``sys/``
samples.

The supervisor's sampler asks this module once per interval
(``InterferenceMeter.sample``): CPU used by processes outside the run's tree
(``sys/other_cpu_pct``: the machine's busy CPU time less the run's and the
supervisor's own, from ``lab.engine.procs``, in % of one core like
``sys/cpu_pct``), and per GPU of the run the processes NVML lists that are not
the run's (``sys/gpu<i>/other_mem_mib``) and the utilisation NVML attributes
to them (``sys/gpu<i>/other_util_pct``, where NVML can attribute; a note
where it cannot, or where it lists pids this machine's process table does
not show, as from another container). ``record()`` is status.json's
``interference``; whether the run shared the machine is one rule,
``is_busy``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from lab import tags
from lab.engine import procs
from lab.engine.devices import nvml as devices

OTHERS_PER_CORE_PCT = 20.0  # a sample is busy when others used more than this share of every core
BUSY_FRACTION = 0.10  # a run is busy when more than this share of its samples were
# psutil's create times rest on the boot time, which Linux gives in whole seconds: one may read
# up to a second early, so "born since the last reading" allows that much
_CT_SLACK_S = 1.0


def sample_is_busy(other_cpu_pct: float, cores: int) -> bool:
    """Did others use more than 20% of a core's worth per core (``other_cpu_pct`` in % of one
    core)?"""
    return other_cpu_pct / max(1, cores) > OTHERS_PER_CORE_PCT


def is_busy(busy_fraction: float, foreign_gpu_processes: Sequence[object]) -> bool:
    """The rule: a run shared the machine when over 10% of its samples were busy, or any foreign GPU
    process ran."""
    return busy_fraction > BUSY_FRACTION or len(foreign_gpu_processes) > 0


class OtherCpu:
    """CPU used outside a process tree (and this process) between two readings, in % of one core."""

    def __init__(self) -> None:
        self._seen: dict[tuple[int, float], float] = {}
        self._last: tuple[float, float, float] | None = None  # (monotonic, wall, machine busy s)
        self.cores = procs.machine_cpu_s()[1]

    def read(self, tree: Sequence[procs.Process]) -> float | None:
        """Others' CPU since the previous reading; None on the first (it only sets the clocks)."""
        mono, wall = time.monotonic(), time.time()
        machine, self.cores = procs.machine_cpu_s()
        now = procs.cpu_seconds(tree)
        ours = 0.0
        for key, total in now.items():
            before = self._seen.get(key)
            if before is None:  # born since the last reading: all its CPU time is in this interval
                before = (
                    0.0
                    if self._last is not None and key[1] >= self._last[1] - _CT_SLACK_S
                    else total
                )
            ours += max(0.0, total - before)
        last, self._seen, self._last = self._last, now, (mono, wall, machine)
        if last is None or mono <= last[0]:
            return None
        return 100.0 * max(0.0, machine - last[2] - ours) / (mono - last[0])


def classify(
    processes: Sequence[devices.GpuProcess], ours: set[int]
) -> tuple[list[devices.GpuProcess], bool]:
    """(GPU processes that are not the run's, whether some pid is not in this machine's process
    table)."""
    foreign, unseen = [], False
    for p in processes:
        line = procs.lineage(p.pid)
        if not line:
            unseen = True
        elif not ours.intersection(line):
            foreign.append(p)
    return foreign, unseen


class InterferenceMeter:
    """One run's interference: per-sample ``sys/`` values, and the running record for
    status.json."""

    def __init__(self) -> None:
        self._cpu = OtherCpu()
        self._since: dict[int, int] = {}  # GPU -> newest NVML utilisation sample seen
        self.samples = self.busy_samples = 0
        self._other_sum = 0.0
        self._foreign: dict[tuple[int, int], float] = {}
        self._notes: dict[int, str] = {}

    def sample(
        self, tree: Sequence[procs.Process], gpus: Sequence[devices.GpuRecord]
    ) -> dict[str, float]:
        """Read once; return the ``sys/`` values to write (none of the CPU's on the first call)."""
        values: dict[str, float] = {}
        other = self._cpu.read(tree)
        if other is not None:
            values[tags.SYS_OTHER_CPU_PCT] = other
            self.samples += 1
            self._other_sum += other
            self.busy_samples += sample_is_busy(other, self._cpu.cores)
        ours = {p.pid for p in tree}
        for g in gpus:
            values.update(self._gpu(g, ours))
        return values

    def _gpu(self, g: devices.GpuRecord, ours: set[int]) -> dict[str, float]:
        foreign, unseen = classify(g.processes, ours)
        for p in foreign:
            key = (g.index, p.pid)
            self._foreign[key] = max(self._foreign.get(key, 0.0), p.used_mib or 0.0)
        out = {tags.sys_gpu(g.index, "other_mem_mib"): sum(p.used_mib or 0.0 for p in foreign)}
        mine = [p.used_mib for p in g.processes if p.pid in ours and p.used_mib is not None]
        if mine:  # NVML's per-process used memory of the run's own processes: context, NCCL too
            out[tags.sys_gpu(g.index, "run_mem_mib")] = float(sum(mine))
        util = devices.process_utilization(g.index, self._since.get(g.index, 0))
        if util is None:
            self._notes[g.index] = (
                f"GPU {g.index}: NVML cannot attribute utilisation to processes here; "
                "other processes are known by the memory they hold"
            )
        else:
            per_pid, self._since[g.index] = util
            out[tags.sys_gpu(g.index, "other_util_pct")] = min(
                100.0, sum(per_pid.get(p.pid, 0.0) for p in foreign)
            )
        if unseen:
            self._notes.setdefault(
                -1 - g.index,
                f"GPU {g.index}: NVML lists processes this machine's process "
                "table does not show (another container's?); they are not counted",
            )
        return out

    def record(self) -> dict:
        """status.json's ``interference`` so far."""
        fraction = self.busy_samples / self.samples if self.samples else 0.0
        mean_cores = self._other_sum / self.samples / 100.0 if self.samples else 0.0
        foreign = [
            {"gpu": g, "pid": p, "used_mib": m} for (g, p), m in sorted(self._foreign.items())
        ]
        reasons = []
        if fraction > BUSY_FRACTION:
            reasons.append(
                f"other processes kept {mean_cores:.1f} of the {self._cpu.cores} cores busy on "
                "average, "
                f"more than {OTHERS_PER_CORE_PCT:.0f}% of every core in {fraction:.0%} of "
                f"{self.samples} samples"
            )
        reasons += [
            f"process {f['pid']} (not this run's) used GPU {f['gpu']}"
            + (f", holding {f['used_mib']:.0f} MiB" if f["used_mib"] else "")
            for f in foreign
        ]
        return {
            "busy": is_busy(fraction, foreign),
            "reasons": reasons,
            "other_cpu_cores_mean": round(mean_cores, 3),
            "busy_fraction": round(fraction, 4),
            "samples": self.samples,
            "foreign_gpu_processes": foreign,
            "gpu_note": " ".join(self._notes[k] for k in sorted(self._notes)) or None,
        }
