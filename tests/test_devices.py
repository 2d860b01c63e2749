"""lab/engine/devices/nvml.py and the supervisor's sampler (lab/engine/supervise/sampler.py): the
real GPU-less path, and a fake NVML.

FAKE: the GPU tests inject tests/fake_nvml.py in place of the ``pynvml``
module that lab/engine/devices/nvml.py imports (this machine has no NVIDIA GPU). The CPU
view, psutil, processes and event files are all real.
"""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from lab.engine import registry
from lab.engine.devices import notes as device_notes
from lab.engine.devices import nvml as devices
from lab.engine.launch.config import problems
from lab.engine.spec.run import RunConfig
from lab.runfolder import write_json_atomic
from tests.fake_nvml import FakeGpu, FakeNvml
from tests.helpers.devices import _load_scalars


@pytest.fixture
def fake(monkeypatch):
    def install(gpus, no_driver=False):
        mod = FakeNvml(gpus, no_driver)
        monkeypatch.setattr(devices, "pynvml", mod)
        return mod

    return install


def test_real_machine_without_driver_gives_cpu_view_and_one_reason():
    snap = devices.snapshot()
    if snap.gpus:
        pytest.skip("this machine has GPUs; the GPU-less path is covered by the fake below")
    assert snap.reason == devices.NO_DRIVER
    assert snap.cpu.cores == psutil.cpu_count()
    assert len(snap.cpu.per_core_pct) == snap.cpu.cores
    assert 0 < snap.cpu.mem_used_mib < snap.cpu.mem_total_mib
    assert devices.gpu_count() == 0
    assert device_notes.describe_machine(snap.gpus, snap.cpu.cores).startswith("CPU (gloo)")


def test_fake_gpus_with_unsupported_metrics(fake):
    nv = fake(
        [
            FakeGpu(uuid="GPU-a"),
            FakeGpu(uuid="GPU-b", unsupported={"power", "temp", "util"}),
            FakeGpu(uuid="GPU-c", name=b"Tesla T4", mem_used_mib=100),
        ]
    )
    snap = devices.snapshot()
    assert snap.reason is None
    assert [g.index for g in snap.gpus] == [0, 1, 2]
    g0, g1, g2 = snap.gpus
    assert (g0.util_pct, g0.power_w, g0.temp_c, g0.mem_total_mib) == (50.0, 250.0, 60.0, 81559.0)
    # NotSupported -> None, no exception
    assert (g1.util_pct, g1.power_w, g1.temp_c) == (None, None, None)
    assert g1.mem_used_mib == 1024.0
    assert g2.name == "Tesla T4"  # bytes names (old drivers) decoded
    assert devices.gpu_count() == 3
    devices.snapshot()
    assert nv.init_calls == 1  # lazily initialised once, not per call


def test_fake_no_driver_reason(fake):
    fake([], no_driver=True)
    snap = devices.snapshot()
    assert snap.gpus == () and snap.reason == devices.NO_DRIVER


def test_gpu_processes_are_named_by_the_owner_the_caller_gives(fake):
    """devices knows no run folder: it asks the ``owner`` callable, and only when NVML lists
    processes."""
    asked: list[int] = []

    def owner(pid: int) -> str | None:
        asked.append(pid)
        return {7: "run-x"}.get(pid)

    fake([FakeGpu(), FakeGpu(processes=[(7, 100), (8, None)])])
    snap = devices.snapshot(owner)
    assert [(p.pid, p.run_id) for p in snap.gpus[1].processes] == [(7, "run-x"), (8, None)]
    assert asked == [7, 8] and snap.gpus[0].processes == ()
    assert all(p.run_id is None for p in devices.snapshot().gpus[1].processes)  # no owner: nobody's
    assert devices.read_gpus(owner=owner, with_processes=False)[1].processes == ()


@pytest.mark.proc
def test_gpu_processes_matched_to_runs_by_ancestry(fake, runs_dir):
    # a real process tree: this test process plays the run's supervisor, a real child holds "GPU
    # memory"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (runs_dir / "run-a").mkdir()
        write_json_atomic(
            runs_dir / "run-a" / "status.json",
            {"state": "running", "supervisor_pid": psutil.Process().pid},
        )
        (runs_dir / ".hidden").mkdir()  # skipped
        vanished = 4_000_000  # above pid_max: a process gone between NVML's list and our walk
        fake([FakeGpu(), FakeGpu(processes=[(child.pid, 3174), (vanished, 512), (1, None)])])
        snap = devices.snapshot(registry.process_owner(runs_dir))
        procs = {p.pid: p for p in snap.gpus[1].processes}
        assert procs[child.pid].run_id == "run-a"
        assert procs[vanished].run_id is None and procs[vanished].used_mib == 512.0
        assert procs[1].run_id is None and procs[1].used_mib is None
        lines = device_notes.holders(snap)
        assert "run run-a holds 3.1 GiB on GPU 1" in lines
        assert not procs[vanished].visible and procs[child.pid].visible
        assert (
            f"process {vanished} (not visible here: another container's or the host's, or it "
            "ended) holds 0.5 GiB on GPU 1" in lines
        )
    finally:
        child.kill()
        child.wait()


def test_gpu_count_from_fake_drives_validation(fake):
    fake([FakeGpu(), FakeGpu()])
    n = devices.gpu_count()
    assert problems(RunConfig(mode="ddp", gpus=(0, 1), nproc=2), n) == []
    errs = problems(RunConfig(mode="dp", gpus=(0, 3)), n)
    assert [e.field for e in errs] == ["gpus"]
    assert "GPU 3 does not exist: this machine has 2 GPUs (0-1)" in errs[0].message


@pytest.mark.proc
def test_sampler_writes_gpu_and_process_tree_scalars(fake, tmp_path):
    from lab.engine.supervise.sampler import SysSampler

    fake([FakeGpu(util=10), FakeGpu(util=77, unsupported={"power"})])
    child = subprocess.Popen(
        [sys.executable, "-c", "x = bytearray(64 << 20); print('ready', flush=True); "
         "import time; time.sleep(30)"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert child.stdout.readline().strip() == "ready"  # its 64 MiB are held from here on
        s = SysSampler(tmp_path, gpus=(1,))
        for _ in range(3):
            vals = s.sample([psutil.Process(child.pid)])
            time.sleep(0.05)
        s.close()
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    assert vals["sys/gpu1/util_pct"] == 77.0
    assert "sys/gpu1/power_w" not in vals and "sys/gpu0/util_pct" not in vals  # only the run's GPUs
    got = _load_scalars(tmp_path / "sys")
    assert got["sys/gpu1/util_pct"] == [77.0] * 3
    assert got["sys/gpu1/temp_c"] == [60.0] * 3
    assert min(got["sys/rss_mib"]) > 60  # the child's 64 MiB buffer


@pytest.mark.gpu
def test_real_gpus():
    snap = devices.snapshot()
    assert snap.reason is None and snap.gpus
    for g in snap.gpus:
        assert g.name and g.uuid.startswith("GPU-")
        assert g.mem_total_mib and g.mem_total_mib > 1000
        assert g.mem_used_mib is not None and 0 <= g.mem_used_mib <= g.mem_total_mib
