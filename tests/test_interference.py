"""lab.engine.devices.interference (the busy rule, CPU outside a run's tree, foreign GPU
processes) and devices.process_utilization.

FAKE: the GPU parts use tests/fake_nvml.py in place of ``pynvml`` (this machine has no GPU); the
processes, their CPU time and the machine's are real: a busy child process is started and ended
here."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from lab.engine.devices import interference
from lab.engine.devices import nvml as devices
from lab.engine.devices.interference import InterferenceMeter, OtherCpu, is_busy, sample_is_busy
from tests.fake_nvml import FakeGpu, FakeNvml

# bounded: ends by itself
BUSY = "import time\nend = time.time() + 30\nwhile time.time() < end:\n    pass\n"


@pytest.fixture
def fake(monkeypatch):
    def install(gpus):
        mod = FakeNvml(gpus)
        monkeypatch.setattr(devices, "pynvml", mod)
        return mod

    return install


@pytest.fixture
def busy_child():
    child = subprocess.Popen([sys.executable, "-c", BUSY])
    yield child
    child.kill()
    child.wait()


def test_the_busy_rule():
    assert not is_busy(0.10, [])  # exactly 10% of the samples: not yet
    assert is_busy(0.11, [])
    assert is_busy(0.0, [{"gpu": 0, "pid": 1, "used_mib": 0.0}])  # any foreign GPU process
    assert not is_busy(0.0, [])
    # 20% of each of 2 cores = 40% of one
    assert sample_is_busy(41.0, 2) and not sample_is_busy(40.0, 2)
    assert sample_is_busy(161.0, 8) and not sample_is_busy(150.0, 8)


def _cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


@pytest.mark.serial
@pytest.mark.proc
def test_cpu_of_the_runs_tree_is_not_counted_as_others(busy_child):
    time.sleep(0.3)
    tree = [psutil.Process(busy_child.pid)]
    # the same interval; only one knows the child is the run's
    with_tree, blind = OtherCpu(), OtherCpu()
    # the first reading sets the clocks
    assert with_tree.read(tree) is None and blind.read([]) is None
    t0, c0 = time.monotonic(), _cpu_s(busy_child.pid)
    time.sleep(1.0)
    child_pct = 100 * (_cpu_s(busy_child.pid) - c0) / (time.monotonic() - t0)
    ours, others = with_tree.read(tree), blind.read([])
    # the machine may be shared (other tests): the child gets what it gets, and exactly that moves
    assert child_pct > 5
    # the two meters read one after the other: what others did in between (and processes that
    # were born or ended there, counted by one meter only) shifts them by a share of others' load
    slack = max(8.0, 0.25 * child_pct, 0.1 * ours)
    assert child_pct > slack / 2
    assert others - ours == pytest.approx(child_pct, abs=slack), (
        ours,
        others,
        child_pct,
    )
    assert 0 <= ours and others <= 100 * psutil.cpu_count() + 5


@pytest.mark.serial
@pytest.mark.proc
def test_a_process_born_between_readings_is_the_runs_from_its_start():
    meter, blind = OtherCpu(), OtherCpu()
    meter.read([]), blind.read([])
    t0 = time.monotonic()
    child = subprocess.Popen([sys.executable, "-c", BUSY])  # born after the first reading
    try:
        time.sleep(1.0)
        # all its CPU time is since then
        child_pct = 100 * _cpu_s(child.pid) / (time.monotonic() - t0)
        ours, others = meter.read([psutil.Process(child.pid)]), blind.read([])
    finally:
        child.kill()
        child.wait()
    assert child_pct > 5
    # the two meters read one after the other: what others did in between (and processes that
    # were born or ended there, counted by one meter only) shifts them by a share of others' load
    slack = max(8.0, 0.25 * child_pct, 0.1 * ours)
    assert child_pct > slack / 2
    assert others - ours == pytest.approx(child_pct, abs=slack), (
        ours,
        others,
        child_pct,
    )


def test_record_busy_fraction_and_reasons(monkeypatch):
    m = InterferenceMeter()
    # % of one core; 2 cores: 90 > 40 is busy, in 3 of 10 samples
    readings = iter([None, 10.0, 90.0, 10.0, 90.0, 10.0, 90.0, 10.0, 10.0, 10.0, 10.0])
    monkeypatch.setattr(m._cpu, "read", lambda tree: next(readings))
    m._cpu.cores = 2
    for _ in range(11):
        m.sample([], ())
    rec = m.record()
    assert rec == {
        "busy": True,
        "reasons": [rec["reasons"][0]],
        "other_cpu_cores_mean": 0.34,
        "busy_fraction": 0.3,
        "busy_samples": 3,
        "busy_cores_mean": 0.9,
        "samples": 10,
        "foreign_gpu_processes": [],
        "gpu_note": None,
    }
    assert rec["reasons"][0].startswith(
        "other processes used 0.9 of 2 cores during 30% of the run (3 of 10 samples"
    )
    quiet = InterferenceMeter()
    monkeypatch.setattr(quiet._cpu, "read", lambda tree: 30.0)
    quiet._cpu.cores = 2
    for _ in range(20):
        quiet.sample([], ())
    assert quiet.record()["busy"] is False and quiet.record()["reasons"] == []


def test_one_busy_sample_never_flags_a_run(monkeypatch):
    m = InterferenceMeter()
    # a short run: one busy sample in 5 is 20% of it, but one sample (a command starting) only
    readings = iter([None, 10.0, 190.0, 10.0, 10.0, 10.0])
    monkeypatch.setattr(m._cpu, "read", lambda tree: next(readings))
    m._cpu.cores = 2
    for _ in range(6):
        m.sample([], ())
    assert m.record()["busy"] is False and m.record()["busy_samples"] == 1
    assert not is_busy(0.5, [], busy_samples=2) and is_busy(0.5, [], busy_samples=3)


@pytest.mark.serial
@pytest.mark.proc
def test_foreign_gpu_processes_and_their_utilisation(fake, busy_child):
    vanished = 2**22 + 12345  # above pid_max on most systems: no such process here
    me = os.getpid()  # not in the run's tree: a foreign process
    fake(
        [
            FakeGpu(),
            FakeGpu(
                processes=[(busy_child.pid, 3000), (me, 1500), (vanished, 100)],
                process_util=[(busy_child.pid, 60, 10), (me, 30, 20), (me, 50, 30)],
            ),
        ]
    )
    m = InterferenceMeter()
    gpus = devices.read_gpus((1,))
    vals = m.sample([psutil.Process(busy_child.pid)], gpus)
    assert vals["sys/gpu1/other_mem_mib"] == 1500.0
    assert vals["sys/gpu1/run_mem_mib"] == 3000.0  # the run's own, NVML's per-process memory
    assert vals["sys/gpu1/other_util_pct"] == 40.0  # the mean of the foreign process's two samples
    assert "sys/gpu0/other_mem_mib" not in vals  # only the GPUs given
    vals = m.sample([psutil.Process(busy_child.pid)], gpus)
    assert vals["sys/gpu1/other_util_pct"] == 0.0  # no sample newer than the last one seen
    rec = m.record()
    assert rec["busy"] is True and rec["foreign_gpu_processes"] == [
        {"gpu": 1, "pid": me, "used_mib": 1500.0}
    ]
    assert f"process {me} (not this run's) used GPU 1, holding 1500 MiB" in rec["reasons"]
    assert "does not show" in rec["gpu_note"]


def test_gpu_that_cannot_attribute_utilisation_gets_a_note(fake):
    fake([FakeGpu(processes=[(os.getpid(), 200)], unsupported={"process_util"})])
    m = InterferenceMeter()
    vals = m.sample([], devices.read_gpus((0,)))
    assert "sys/gpu0/other_util_pct" not in vals and vals["sys/gpu0/other_mem_mib"] == 200.0
    assert "cannot attribute utilisation" in m.record()["gpu_note"]


def test_process_utilization(fake):
    fake(
        [
            FakeGpu(process_util=[(7, 10, 100), (7, 30, 200), (8, 90, 150)]),
            FakeGpu(unsupported={"process_util"}),
        ]
    )
    assert devices.process_utilization(0) == ({7: 20.0, 8: 90.0}, 200)
    assert devices.process_utilization(0, 150) == ({7: 30.0}, 200)
    # NVML's NotFound: nobody computed since
    assert devices.process_utilization(0, 200) == ({}, 200)
    assert devices.process_utilization(1) is None
    assert devices.process_utilization(5) is None  # no such GPU


def test_no_driver_attributes_nothing(fake):
    mod = fake([])
    mod.no_driver = True
    assert devices.process_utilization(0) is None


@pytest.mark.serial
@pytest.mark.proc
def test_sampler_writes_other_tags_and_keeps_the_record(fake, tmp_path, busy_child):
    from lab.engine.supervise.sampler import SysSampler
    from tests.helpers.devices import _load_scalars

    fake([FakeGpu(processes=[(os.getpid(), 700)], process_util=[(os.getpid(), 25, 5)])])
    s = SysSampler(tmp_path, gpus=(0,))
    for _ in range(3):
        s.sample([psutil.Process(busy_child.pid)])
        time.sleep(0.2)
    s.close()
    got = _load_scalars(tmp_path / "sys")
    assert len(got["sys/other_cpu_pct"]) == 2  # none on the first sample: it only sets the clocks
    assert got["sys/gpu0/other_mem_mib"] == [700.0] * 3 and got["sys/gpu0/other_util_pct"] == [
        25.0,
        0.0,
        0.0,
    ]
    rec = s.interference()
    assert (
        rec["samples"] == 2
        and rec["busy"] is True
        and rec["foreign_gpu_processes"][0]["pid"] == os.getpid()
    )
    assert interference.BUSY_FRACTION == 0.10 and interference.OTHERS_PER_CORE_PCT == 20.0


@pytest.mark.gpu
def test_real_nvml_answers_or_says_it_cannot_attribute():
    # the real pynvml: an empty sample list, NotFound and "not supported" all end as a value, never
    # an error
    for g in devices.read_gpus():
        got = devices.process_utilization(g.index)
        assert got is None or (
            isinstance(got[0], dict) and all(0 <= v <= 100 for v in got[0].values())
        )
