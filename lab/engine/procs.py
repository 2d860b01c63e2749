"""The one gateway to psutil: processes, their trees, and the machine's CPU view.

This module owns the low-level questions about processes: is this pid still
the process we recorded (a pid can be reused, so the create time is compared;
a zombie counts as dead), whether a pid exists in this pid namespace at all
(``visible``: NVML reports host pids inside a container), which processes
belong to a run's tree, a process's ancestry, how much CPU and memory a tree
uses (``TreeMeter``), the machine's CPU record, how to end a tree for sure
(SIGTERM, then SIGKILL after a grace period) and which are torchrun's ranks
(``rank_pids``). It never starts a process and knows nothing of run folders.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from typing import Iterable

import psutil

log = logging.getLogger(__name__)
Process = psutil.Process  # the handle ``tree`` returns, for callers' type hints
_MIB = 1024 * 1024

# psutil derives create times from boot time + clock ticks; two reads of the
# same process agree far better than this, a reused pid almost never does.
_CT_TOLERANCE_S = 0.05


def create_time(pid: int) -> float | None:
    """The create time of ``pid``, or None when there is no such process."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, ValueError):
        return None


def visible(pid: int) -> bool:
    """True when a process ``pid`` exists in this pid namespace (a container's host pids do not)."""
    try:
        return psutil.pid_exists(int(pid))
    except (ValueError, OverflowError):
        return False


def alive(pid: int | None, ct: float | None = None) -> bool:
    """True when ``pid`` runs, is not a zombie, and (if ``ct`` given) is the same process."""
    if not pid:
        return False
    try:
        p = psutil.Process(int(pid))
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
        return ct is None or abs(p.create_time() - float(ct)) < _CT_TOLERANCE_S
    except (psutil.Error, ValueError):
        return False


def _kids(pid: int) -> list[int] | None:
    """Children of ``pid`` from /proc/<pid>/task/*/children (Linux); None where that file is missing
    (psutil's ``children()`` reads every process on the machine; the supervisor walks its tree every
    second)."""
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                out += [int(x) for x in f.read().split()]
    except FileNotFoundError:
        if os.path.isdir(f"/proc/{pid}/task"):
            # the kernel lacks CONFIG_PROC_CHILDREN (a thread ending is too rare to matter)
            return None
        return out  # the process ended meanwhile
    except (OSError, ValueError):
        return None
    return out


def tree(pid: int | None, ct: float | None = None) -> list[psutil.Process]:
    """``pid`` and all its descendants (empty when ``pid`` is gone or reused)."""
    if not alive(pid, ct):
        return []
    try:
        root = psutil.Process(int(pid))  # type: ignore[arg-type]
        out, todo = [root], [root.pid]
        while todo:
            kids = _kids(todo.pop())
            if kids is None:
                return [root] + root.children(recursive=True)
            for k in kids:
                try:
                    out.append(psutil.Process(k))
                    todo.append(k)
                except psutil.Error:  # ended between the two reads: normal
                    pass
        return out
    except psutil.Error:
        return []


def identities(procs: Iterable[psutil.Process]) -> list[list[float]]:
    """``[[pid, create_time], ...]`` for recording in status.json."""
    out = []
    for p in procs:
        try:
            out.append([p.pid, p.create_time()])
        except psutil.Error:
            continue
    return out


def _live(ident: Iterable[Iterable[float]]) -> list[psutil.Process]:
    out = []
    for pid, ct in ident:
        if alive(int(pid), ct):
            with contextlib.suppress(psutil.Error):
                out.append(psutil.Process(int(pid)))
    return out


def _signal_group(pgid: int | None, sig: int) -> None:
    if not pgid or pgid == os.getpgrp():
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(int(pgid), sig)


def end_tree(
    members: Iterable[Iterable[float]], pgids: Iterable[int | None], grace_s: float = 5.0
) -> list[int]:
    """End every recorded process (and any descendant) of a run; return pids still alive.

    SIGTERM to the groups and each member, SIGKILL after ``grace_s`` (a rank stuck in a collective
    ignores SIGTERM). Descendants are collected first: once a parent dies its re-parented children
    are lost to us."""
    procs = {p.pid: p for p in _live(members)}
    for p in list(procs.values()):
        with contextlib.suppress(psutil.Error):
            for c in p.children(recursive=True):
                procs[c.pid] = c
    groups = {g for g in pgids if g}
    for g in groups:
        _signal_group(g, signal.SIGTERM)
    for p in procs.values():
        with contextlib.suppress(psutil.Error):
            p.terminate()
    still = _wait_gone(list(procs.values()), grace_s)
    if still or groups:
        for g in groups:
            _signal_group(g, signal.SIGKILL)
        for p in still:
            try:
                for c in p.children(recursive=True):
                    c.kill()
                p.kill()
            except psutil.Error:
                pass
        still = _wait_gone(still, 3.0)
    left = [p.pid for p in still]
    if left:
        log.warning("processes still alive after SIGKILL: %s", left)
    return left


def _wait_gone(ps: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Poll until every process is gone or a zombie; return those still running (not
    psutil.wait_procs: an orphaned zombie whose reaper is slow, or absent in some containers, would
    wait out the timeout)."""
    end = time.monotonic() + max(0.0, timeout_s)
    while True:
        ps = [p for p in ps if _is_running(p)]
        if not ps or time.monotonic() >= end:
            return ps
        time.sleep(0.02)


def _is_running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_until(pred, timeout_s: float, every_s: float = 0.05) -> bool:
    """Poll ``pred()`` until it is true or ``timeout_s`` passes; return its last value."""
    end = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() >= end:
            return False
        time.sleep(every_s)
    return True


def end_recorded(status: dict, grace_s: float = 5.0) -> list[int]:
    """End the processes a status.json recorded (training root, its group, the tree seen)."""
    members = [list(m) for m in status.get("tree") or []]
    if status.get("pid"):
        members.append([status["pid"], status.get("pid_ct")])
    # the group id is only signalled while its leader is provably ours: a pgid can be reused too
    groups = [status.get("pgid")] if alive(status.get("pid"), status.get("pid_ct")) else []
    return end_tree([m for m in members if m[0]], groups, grace_s)


def rank_pids(procs: Iterable[psutil.Process]) -> dict[int, int]:
    """local rank -> pid of each torchrun worker among ``procs`` (``LOCAL_RANK`` in its
    environment); the oldest per rank, since its DataLoader workers inherit the variable. Empty
    where none can be read."""
    found: dict[int, tuple[float, int]] = {}
    for p in procs:
        with contextlib.suppress(psutil.Error, ValueError, KeyError):
            rank, ct = int(p.environ()["LOCAL_RANK"]), p.create_time()
            if rank not in found or ct < found[rank][0]:
                found[rank] = (ct, p.pid)
    return {r: pid for r, (_, pid) in sorted(found.items())}


def lineage(pid: int) -> list[int]:
    """``pid``, its parent, grandparent, ... up to the first process; empty when ``pid`` is gone."""
    out: list[int] = []
    try:
        p: psutil.Process | None = psutil.Process(int(pid))
        while p is not None:
            out.append(p.pid)
            p = p.parent()
    except psutil.Error:  # vanished during the walk: what was seen is still true
        pass
    return out


class TreeMeter:
    """CPU percent and RSS summed over a process tree, one reading per ``read`` (the ``Process``
    objects are kept between readings: psutil's ``cpu_percent`` measures since the previous call on
    the same object)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[int, float], psutil.Process] = {}

    def read(self, procs: Iterable[psutil.Process]) -> tuple[float, float]:
        """(CPU percent, RSS in MiB) of ``procs``; a process that exits meanwhile is skipped."""
        cpu, rss = 0.0, 0
        current: dict[tuple[int, float], psutil.Process] = {}
        for p in procs:
            try:
                key = (p.pid, p.create_time())
                q = self._seen.get(key, p)
                with q.oneshot():
                    cpu += q.cpu_percent(interval=None)
                    rss += q.memory_info().rss
                current[key] = q
            except psutil.Error:  # exited between the walk and the read: normal
                continue
        self._seen = current
        return cpu, rss / _MIB


def cpu_seconds(procs: Iterable[psutil.Process]) -> dict[tuple[int, float], float]:
    """User + system CPU seconds of each process and of this one, by (pid, create time); gone ones
    left out."""
    out = {}
    for p in [*procs, psutil.Process()]:
        try:
            t = p.cpu_times()
            out[(p.pid, p.create_time())] = t.user + t.system
        except psutil.Error:  # ended between the walk and the read: normal
            continue
    return out


@dataclass(frozen=True)
class CpuRow:
    """One process of the machine in ``cpu_table``: its CPU seconds so far (user + system)."""

    pid: int
    ppid: int
    ct: float
    cpu_s: float


def cpu_table() -> list[CpuRow]:
    """Every process this pid namespace shows, with its parent and CPU seconds (ones that end
    meanwhile are left out). On Linux read straight from ``/proc/<pid>/stat`` (a fifth of psutil's
    cost per process: the sampler reads it every second), elsewhere through psutil."""
    if os.path.isdir("/proc/self"):
        return _proc_table()
    out = []
    for p in psutil.process_iter(["pid", "ppid", "create_time", "cpu_times"]):
        info = p.info
        t = info.get("cpu_times")
        if t is None or info.get("create_time") is None:
            continue
        out.append(
            CpuRow(info["pid"], info.get("ppid") or 0, info["create_time"], t.user + t.system)
        )
    return out


def _proc_table() -> list[CpuRow]:
    tick, boot = os.sysconf("SC_CLK_TCK"), psutil.boot_time()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read()
        except OSError:  # ended between the listing and the read: normal
            continue
        # after the command's closing parenthesis: state ppid ... utime(14) stime(15) ...
        fields = raw[raw.rfind(b")") + 2 :].split()
        try:
            ppid, utime, stime, start = (
                int(fields[1]),
                int(fields[11]),
                int(fields[12]),
                int(fields[19]),
            )
        except (IndexError, ValueError):
            continue
        out.append(CpuRow(int(name), ppid, boot + start / tick, (utime + stime) / tick))
    return out


def cmdline(pid: int) -> list[str]:
    """The command line of ``pid``; empty when it is gone or cannot be read."""
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def machine_cpu_s() -> tuple[float, int]:
    """(seconds all CPUs spent busy since boot, logical CPUs); guest time is already in user
    time."""
    t = psutil.cpu_times()
    busy = (
        sum(t)
        - t.idle
        - getattr(t, "iowait", 0.0)
        - getattr(t, "guest", 0.0)
        - getattr(t, "guest_nice", 0.0)
    )
    return busy, psutil.cpu_count() or 1


@dataclass(frozen=True)
class CpuRecord:
    cores: int
    util_pct: float
    per_core_pct: tuple[float, ...]
    mem_used_mib: float
    mem_total_mib: float


_cpu_read = {"at": time.monotonic(), "calls": 0}


def cpu_record() -> CpuRecord:
    """Cores, utilisation since the last call, and memory of this machine."""
    # psutil measures since the previous call; too recent a previous call gives noise, and the
    # first call would measure this process's own start-up (imports: a whole core busy, so `lab
    # gpus` on an idle machine read 75%): it measures half a second from now instead
    first = _cpu_read["calls"] == 0
    wait = 0.5 if first else 0.2 if time.monotonic() - _cpu_read["at"] < 0.1 else None
    _cpu_read["calls"] += 1
    per = tuple(float(x) for x in psutil.cpu_percent(interval=wait, percpu=True))
    _cpu_read["at"] = time.monotonic()
    vm = psutil.virtual_memory()
    return CpuRecord(
        cores=psutil.cpu_count() or 1,
        util_pct=round(sum(per) / len(per), 1) if per else 0.0,
        per_core_pct=per,
        mem_used_mib=round((vm.total - vm.available) / _MIB, 1),
        mem_total_mib=round(vm.total / _MIB, 1),
    )


# prime: the first reading after import is meaningless
psutil.cpu_percent(interval=None, percpu=True)
