"""lab/engine/procs.py, the one psutil gateway, on real processes of this machine.

Ending whole trees of real runs (SIGTERM, SIGKILL, stragglers) is covered by
tests/test_engine_runs.py; here are the small questions: a pid's identity,
its ancestry, a tree's CPU and memory, the machine's CPU record.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from lab.engine import procs


@pytest.fixture
def child():
    """A real child that holds 64 MiB and spins a little, so it has both RSS and CPU time."""
    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nx = bytearray(64 << 20)\nend = time.time() + 30\n"
            "while time.time() < end:\n    sum(range(10000))\n",
        ]
    )
    time.sleep(0.5)
    yield p
    p.kill()
    p.wait()


@pytest.mark.proc
def test_alive_compares_the_create_time_and_counts_a_zombie_dead(child):
    ct = procs.create_time(child.pid)
    assert procs.alive(child.pid, ct) and procs.alive(child.pid)
    assert not procs.alive(child.pid, ct - 100)  # the same pid, another process: reused
    assert not procs.alive(None) and procs.create_time(4_000_000) is None
    child.kill()
    time.sleep(0.2)  # not reaped yet: a zombie
    assert not procs.alive(child.pid, ct)


@pytest.mark.proc
def test_lineage_runs_from_a_pid_to_the_first_process(child):
    line = procs.lineage(child.pid)
    assert line[:2] == [child.pid, os.getpid()] and line[-1] == 1
    assert procs.lineage(4_000_000) == []  # above pid_max: gone


@pytest.mark.proc
def test_tree_meter_sums_cpu_and_rss_of_a_tree(child):
    meter = procs.TreeMeter()
    tree = procs.tree(child.pid)
    assert [p.pid for p in tree] == [child.pid]
    # psutil's first CPU reading of a process is 0: the meter keeps it for the next
    meter.read(tree)
    time.sleep(0.3)
    cpu, rss_mib = meter.read(procs.tree(child.pid))  # new Process objects, same processes
    assert cpu > 5 and rss_mib > 60
    child.kill()
    child.wait()
    assert meter.read(tree) == (0.0, 0.0)  # a process gone between the walk and the read is skipped


def test_cpu_record_of_this_machine():
    rec = procs.cpu_record()
    assert rec.cores == os.cpu_count() and len(rec.per_core_pct) == rec.cores
    assert 0 <= rec.util_pct <= 100 and 0 < rec.mem_used_mib < rec.mem_total_mib


def test_the_first_cpu_reading_measures_from_now_not_from_start_up(monkeypatch):
    # the first reading after import would span this process's own imports (a busy core): it
    # waits half a second from the call instead; later readings measure since the previous one
    monkeypatch.setitem(procs._cpu_read, "calls", 0)
    t0 = time.monotonic()
    procs.cpu_record()
    first = time.monotonic() - t0
    time.sleep(0.15)
    t1 = time.monotonic()
    procs.cpu_record()
    assert first >= 0.5 and time.monotonic() - t1 < 0.3
