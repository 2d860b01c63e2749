"""What else used the machine while a run ran: status.json's ``interference`` and its ``sys/``
samples.

The supervisor's sampler asks this module once per interval
(``InterferenceMeter.sample``): CPU used by other processes (``sys/other_cpu_pct``, in % of one
core like ``sys/cpu_pct``: the CPU time of each process this machine shows that is not in the
run's tree, not the supervisor, not the lab's own commands or server; ``OtherCpu``), and per GPU
of the run the processes NVML lists that are not the run's (``sys/gpu<i>/other_mem_mib``) and
the utilisation NVML attributes to them (``sys/gpu<i>/other_util_pct``, where NVML can attribute;
a note where it cannot, or where it lists pids this machine's process table does not show, as
from another container). ``record()`` is status.json's ``interference``; whether the run shared
the machine is one rule, ``is_busy``: more than 10% of its samples, and at least 3, had others
over 20% of every core (one sample never flags a run), or a foreign GPU process ran. The reason
says how much of the run was shared ("other processes used 0.4 of 2 cores during 35% of the
run"). The sampler also keeps the most processes of the run's tree that trained at once
(``train_processes``: over a quarter of a core each, and over half the busiest's, in one
interval)"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from lab import tags
from lab.engine import procs
from lab.engine.devices import nvml as devices

OTHERS_PER_CORE_PCT = 20.0  # a sample is busy when others used more than this share of every core
BUSY_FRACTION = 0.10  # a run is busy when more than this share of its samples were
MIN_BUSY_SAMPLES = 3  # and at least this many: one sample (a command's start-up) never flags a run
# a process of the run's tree "trains" in an interval when it used over this % of a core and at
# least half of what the tree's busiest used (a crowded machine gives each less than a core; a
# DataLoader worker uses a fraction of its trainer's)
TRAIN_PROCESS_PCT = 25.0
# psutil's create times rest on the boot time, which Linux gives in whole seconds: one may read
# up to a second early, so "born since the last reading" allows that much
_CT_SLACK_S = 1.0
_ANCESTRY = 64  # parents walked up to find whether a process descends from the run's tree


def sample_is_busy(other_cpu_pct: float, cores: int) -> bool:
    """Did others use more than 20% of a core's worth per core (``other_cpu_pct`` in % of one
    core)?"""
    return other_cpu_pct / max(1, cores) > OTHERS_PER_CORE_PCT


def is_busy(
    busy_fraction: float, foreign_gpu_processes: Sequence[object], busy_samples: int | None = None
) -> bool:
    """The rule: a run shared the machine when over 10% of its samples, and at least 3, were busy,
    or any foreign GPU process ran (``busy_samples`` None: the fraction alone decides)."""
    enough = busy_samples is None or busy_samples >= MIN_BUSY_SAMPLES
    return (busy_fraction > BUSY_FRACTION and enough) or len(foreign_gpu_processes) > 0


def is_lab_command(argv: Sequence[str]) -> bool:
    """The lab's own commands and server, which are not "other processes": ``python -m lab ...``
    (the command line; a run's supervisor, ``-m lab.engine...``, and its training are not) and
    the Streamlit server."""
    args = list(argv)
    for i, a in enumerate(args[:-1]):
        if a == "-m" and args[i + 1] in ("lab", "streamlit"):
            return True
    return any(Path(a).name == "streamlit" for a in args[:2])


class OtherCpu:
    """CPU used between two readings by processes that are not a run's, in % of one core.

    Each process's CPU time is read (``procs.cpu_table``) and counted as others' only when it is
    neither in the run's tree (given, or descending from a member), nor this process, nor one of
    the lab's own commands (``is_lab_command``). A process that ended between two readings is not
    counted at all: its owner cannot be told, and most are a run's own teardown or a short
    command. ``train_processes``: how many of the tree's processes trained in the last interval
    (over ``TRAIN_PROCESS_PCT`` of a core, and over half of the busiest's)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[int, float], float] = {}
        self._lab: dict[tuple[int, float], bool] = {}  # whose a process is, read once
        self._last: tuple[float, float] | None = None  # (monotonic, wall)
        self.cores = procs.machine_cpu_s()[1]
        self.train_processes = 0
        self._me = os.getpid()

    def read(self, tree: Sequence[procs.Process]) -> float | None:
        """Others' CPU since the previous reading; None on the first (it only sets the clocks)."""
        mono, wall = time.monotonic(), time.time()
        self.cores = procs.machine_cpu_s()[1]
        rows = procs.cpu_table()
        parent = {r.pid: r.ppid for r in rows}
        roots = {p.pid for p in tree}
        deltas: dict[int, float] = {}
        now: dict[tuple[int, float], float] = {}
        for r in rows:
            key = (r.pid, r.ct)
            now[key] = r.cpu_s
            before = self._seen.get(key)
            if before is None:  # born since the last reading: all its CPU time is in this interval
                born = self._last is not None and r.ct >= self._last[1] - _CT_SLACK_S
                before = 0.0 if born else r.cpu_s
            if r.cpu_s > before:
                deltas[r.pid] = r.cpu_s - before
        self._lab = {k: v for k, v in self._lab.items() if k in now}
        last, self._seen, self._last = self._last, now, (mono, wall)
        if last is None or mono <= last[0]:
            return None
        dt = mono - last[0]
        others, training = 0.0, []
        cts = {r.pid: r.ct for r in rows}
        for pid, used in deltas.items():
            if _descends(pid, roots, parent):
                training.append(100.0 * used / dt)
            elif pid != self._me and not self._is_lab(pid, cts[pid]):
                others += used
        bar = max([TRAIN_PROCESS_PCT, *(0.5 * p for p in training)])
        self.train_processes = sum(p > bar for p in training)
        return 100.0 * others / dt

    def _is_lab(self, pid: int, ct: float) -> bool:
        key = (pid, ct)
        if key not in self._lab:
            self._lab[key] = is_lab_command(procs.cmdline(pid))
        return self._lab[key]


def _descends(pid: int, roots: set[int], parent: dict[int, int]) -> bool:
    """Is ``pid`` one of ``roots`` or below one of them?"""
    for _ in range(_ANCESTRY):
        if pid in roots:
            return True
        pid = parent.get(pid, 0)
        if pid <= 1:
            return False
    return False


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
        self._other_sum = self._busy_sum = 0.0
        self.train_processes = 0  # the most processes of the tree training at once
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
            self.train_processes = max(self.train_processes, self._cpu.train_processes)
            if sample_is_busy(other, self._cpu.cores):
                self.busy_samples += 1
                self._busy_sum += other
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
        busy_cores = self._busy_sum / self.busy_samples / 100.0 if self.busy_samples else 0.0
        reasons = []
        if is_busy(fraction, (), self.busy_samples):
            reasons.append(
                f"other processes used {busy_cores:.1f} of {self._cpu.cores} cores during "
                f"{fraction:.0%} of the run ({self.busy_samples} of {self.samples} samples, "
                f"each over {OTHERS_PER_CORE_PCT:.0f}% of every core)"
            )
        reasons += [
            f"process {f['pid']} (not this run's) used GPU {f['gpu']}"
            + (f", holding {f['used_mib']:.0f} MiB" if f["used_mib"] else "")
            for f in foreign
        ]
        return {
            "busy": is_busy(fraction, foreign, self.busy_samples),
            "reasons": reasons,
            "other_cpu_cores_mean": round(mean_cores, 3),
            "busy_fraction": round(fraction, 4),
            "busy_samples": self.busy_samples,
            "busy_cores_mean": round(busy_cores, 3),
            "samples": self.samples,
            "foreign_gpu_processes": foreign,
            "gpu_note": " ".join(self._notes[k] for k in sorted(self._notes)) or None,
        }
