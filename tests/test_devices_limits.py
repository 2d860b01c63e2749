"""What real GPU machines do to the lab, and that it says what it cannot show instead of failing.

FAKE: NVIDIA GPUs are faked (tests/fake_nvml.py in place of ``pynvml``, this
machine has none); the fake raises what nvidia-ml-py 13.x raises. Each case
is checked where a user meets it: ``lab.engine.devices.nvml`` itself, the CLI
(``python -m lab gpus``, ``launch --dry-run``, through ``lab.cli.main``), the
pre-flight lines and the pages (AppTest). The cases: a GPU NVML will not open
(``NoPermission`` on its handle: the readable indices are 0, 1, 3), a process
list that is not permitted (a MIG parent for a non-root user), a driver older
than the bindings (``NVMLLibraryMismatchError``, which is not an
``NVMLError``), host pids that psutil cannot see (a container without
``--pid=host``), and MIG mode. Also: the launched environment names GPUs by
UUID, and the ``LAB_NVML_MODULE`` seam reaches the processes the lab starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psutil
import pytest
from streamlit.testing.v1 import AppTest

from lab.engine import registry
from lab.engine.devices import notes as device_notes
from lab.engine.devices import nvml as devices
from lab.engine.launch.backends import build_command
from lab.engine.preflight.checks import preflight
from lab.engine.spec.run import RunConfig
from lab.runfolder import REPO_ROOT, write_json_atomic
from lab.views.device_strip import device_rows
from tests.fake_nvml import FakeGpu, FakeNvml, NVMLLibraryMismatchError
from tests.helpers.cli import lab_in_process

# above pid_max: a pid NVML reports that does not exist in this pid namespace
HIDDEN_PID = 4_000_001


@pytest.fixture
def fake(monkeypatch):
    import streamlit as st

    def install(gpus):
        mod = FakeNvml(gpus)
        monkeypatch.setattr(devices, "pynvml", mod)
        st.cache_data.clear()  # the Launch page caches its snapshot
        return mod

    yield install
    st.cache_data.clear()


def _cli(capsys, runs_dir, *argv) -> tuple[int, str, str]:
    """``python -m lab ARGV`` in this process (the fake NVML is here), as (exit code, stdout,
    stderr)."""
    r = lab_in_process(capsys, *argv)
    return r.returncode, r.stdout, r.stderr


def _page(page: str | None = None) -> AppTest:
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=30)
    at.run()
    assert not at.exception, at.exception
    if page:
        at.switch_page(page)
        at.run()
        assert not at.exception, at.exception
    return at


def _captions(at: AppTest) -> str:
    return "\n".join(c.value for c in at.caption)


def test_a_gpu_nvml_will_not_open_is_named_and_cannot_be_chosen(fake, runs_dir, capsys):
    fake(
        [
            FakeGpu(uuid="GPU-a"),
            FakeGpu(uuid="GPU-b"),
            FakeGpu(uuid="GPU-c", no_permission={"handle"}),
            FakeGpu(uuid="GPU-d"),
        ]
    )
    snap = devices.snapshot()
    assert [g.index for g in snap.gpus] == [0, 1, 3] and devices.usable_indices() == (0, 1, 3)
    assert devices.gpu_count() == 4 and snap.reason is None
    assert snap.notes == (
        "GPU 2: NVML would not open it (no permission, or the GPU is lost): not shown, "
        "cannot be chosen",
    )
    code, out, _ = _cli(capsys, runs_dir, "gpus")
    assert code == 0 and "GPU 2: NVML would not open it" in out and "GPU 3 NVIDIA H100" in out
    code, _, err = _cli(capsys, runs_dir, "launch", "--dry-run", "--mode", "dp", "--gpus", "1,2")
    assert code == 2 and err.splitlines() == [
        "error: gpus: GPU 2 cannot be used: the GPUs NVML can read here are 0, 1, 3: pick among "
        "them"
    ]
    code, out, _ = _cli(
        capsys, runs_dir, "launch", "--dry-run", "--mode", "ddp", "--batch-size", "66", "--json"
    )
    shown = json.loads(out)
    # the default: all readable
    assert code == 0 and shown["env"]["CUDA_VISIBLE_DEVICES"] == "GPU-a,GPU-b,GPU-d"
    assert shown["argv"][shown["argv"].index("--nproc-per-node") + 1] == "3"
    at = _page("pages/1_Launch.py")
    assert [c.key for c in at.checkbox if c.key.startswith("launch_gpu_")] == [
        "launch_gpu_0",
        "launch_gpu_1",
        "launch_gpu_3",
    ]
    assert "GPU 2: NVML would not open it" in _captions(at)


def test_a_process_list_not_permitted_is_unknown_not_empty(fake, runs_dir, capsys):
    fake([FakeGpu(no_permission={"processes"}), FakeGpu(processes=[(os.getpid(), 100)])])
    snap = devices.snapshot()
    g0, g1 = snap.gpus
    assert g0.processes == () and g0.processes_note == "process list not permitted"
    assert g1.processes_note is None and [p.pid for p in g1.processes] == [os.getpid()]
    assert device_notes.limits(snap) == [
        "GPU 0: process list not permitted, so which processes use it is unknown"
    ]
    assert "process list not permitted" in device_rows(snap)[0]["extra"]
    assert "process list" not in device_rows(snap)[1]["extra"]
    lines = preflight(RunConfig(mode="single", gpus=(0,)), snap)
    assert (
        "Cannot see: GPU 0: process list not permitted, so which processes use it is unknown."
        in lines
    )
    code, out, _ = _cli(capsys, runs_dir, "gpus")
    assert code == 0 and "GPU 0: process list not permitted" in out
    at = _page()
    assert "process list not permitted" in _captions(at)


def test_an_older_driver_never_raises_and_uses_the_calls_it_has(fake, runs_dir):
    """pynvml 13.x's unversioned process calls raise NVMLLibraryMismatchError (not an NVMLError) on
    older drivers, and nvmlDeviceGetTemperatureV is not found there: the versioned and deprecated
    calls are used."""
    nv = fake([FakeGpu(old_driver=True, processes=[(os.getpid(), 256)]), FakeGpu()])
    old, new = devices.snapshot().gpus
    # through the _v2 call
    assert [p.used_mib for p in old.processes] == [256.0] and old.processes_note is None
    assert old.temp_c == new.temp_c == 60.0
    # the old driver only; the new one answers the V call
    assert nv.calls.count("temp_deprecated") == 1

    # every process call fails, as does memory, in ways NVML's own errors do not cover
    class Broken(FakeNvml):
        def nvmlDeviceGetComputeRunningProcesses_v2(self, g):
            raise NVMLLibraryMismatchError("no versioned call either")

        def nvmlDeviceGetMemoryInfo(self, g):
            raise RuntimeError("driver returned garbage")

    # monkeypatch restores the module at the end
    devices.pynvml = Broken([FakeGpu(old_driver=True)])
    g = devices.snapshot().gpus[0]
    assert (g.mem_used_mib, g.mem_total_mib) == (None, None) and g.util_pct == 50.0
    assert g.processes_note == "process list n/a (the driver is older than nvidia-ml-py)"
    assert device_rows(devices.snapshot())[0]["mem_text"] == "memory – / –"
    at = _page()  # the home page's device strip: no exception, says what it cannot show
    assert "process list n/a (the driver is older than nvidia-ml-py)" in _captions(at)


def test_host_pids_in_a_container_go_to_the_run_that_chose_the_gpu(fake, runs_dir, capsys):
    run = runs_dir / "run-gpu1"
    run.mkdir()
    write_json_atomic(
        run / "run.json", {"run_id": "run-gpu1", "config": {"mode": "single", "gpus": [1]}}
    )
    write_json_atomic(
        run / "status.json",
        {
            "state": "running",
            "supervisor_pid": psutil.Process().pid,
            "supervisor_ct": psutil.Process().create_time(),
        },
    )
    fake([FakeGpu(processes=[(HIDDEN_PID + 1, 300)]), FakeGpu(processes=[(HIDDEN_PID, 2048)])])
    snap = devices.snapshot(registry.process_owner(runs_dir), registry.gpu_users(runs_dir))
    (p0,), (p1,) = snap.gpus[0].processes, snap.gpus[1].processes
    assert (p1.run_id, p1.visible) == ("run-gpu1", False)
    # no run chose GPU 0: whose it is, nobody here knows
    assert (p0.run_id, p0.visible) == (None, False)
    assert device_notes.holders(snap) == [
        f"process {HIDDEN_PID + 1} (not visible here: another container's or the host's, or it "
        "ended) holds 0.3 GiB on GPU 0",
        f"run run-gpu1 (by the GPU it chose: pid {HIDDEN_PID} is not visible here) holds 2.0 GiB "
        "on GPU 1",
    ]
    assert (
        registry.gpu_users(runs_dir)(1) == ("run-gpu1",) and registry.gpu_users(runs_dir)(0) == ()
    )
    busy = [
        line
        for line in preflight(RunConfig(mode="single", gpus=(1,)), snap)
        if "already in use" in line
    ]
    assert busy == [
        f"Warning: GPU 1 is already in use (run run-gpu1 (by the GPU it chose: pid {HIDDEN_PID} "
        "is not "
        "visible here) holds 2.0 GiB on GPU 1): the run will share its memory and compute "
        "(slower, and "
        "out of memory if both grow); pick a free GPU or stop that process first."
    ]
    code, out, _ = _cli(capsys, runs_dir, "gpus")
    assert code == 0 and "run run-gpu1 (by the GPU it chose" in out
    assert device_rows(snap)[1]["extra"].endswith("runs: run-gpu1")


def test_mig_mode_is_said(fake, runs_dir, capsys):
    fake(
        [
            FakeGpu(uuid="GPU-mig-parent", mig=True, no_permission={"processes"}),
            FakeGpu(uuid="GPU-plain"),
        ]
    )
    snap = devices.snapshot()
    mig, plain = snap.gpus
    assert mig.mig and not plain.mig and mig.util_pct is None and mig.mem_total_mib == 81559.0
    assert mig.notes[0].startswith(
        "MIG mode is on: NVML gives no utilisation or process list for the whole GPU"
    )
    row = device_rows(snap)[0]
    assert row["util_text"] == "util n/a" and "MIG mode" in row["extra"]
    lines = preflight(RunConfig(mode="single", gpus=(0,)), snap)
    assert any(line.startswith("Cannot see: GPU 0: MIG mode is on") for line in lines)
    assert not any("MIG" in line for line in preflight(RunConfig(mode="single", gpus=(1,)), snap))
    code, out, _ = _cli(capsys, runs_dir, "gpus")
    assert (
        code == 0 and "GPU 0: MIG mode is on" in out and "GPU 0: process list not permitted" in out
    )
    at = _page("pages/1_Launch.py")
    assert not at.error
    # the pre-flight
    assert any("Cannot see" in m.value and "MIG mode is on" in m.value for m in at.markdown)


def test_the_launched_environment_names_gpus_by_uuid(fake, tmp_path):
    fake([FakeGpu(uuid="GPU-aaaa"), FakeGpu(uuid="MIG-bbbb"), FakeGpu(uuid="GPU-cccc")])
    _, env = build_command(RunConfig(mode="dp", gpus=(2, 0)), tmp_path, 0, base_env={})
    assert (
        env["CUDA_VISIBLE_DEVICES"] == "GPU-cccc,GPU-aaaa"
        and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    )
    _, env = build_command(RunConfig(mode="single", gpus=(1,)), tmp_path, 0, base_env={})
    assert env["CUDA_VISIBLE_DEVICES"] == "MIG-bbbb"
    _, env = build_command(RunConfig(), tmp_path, 0, base_env={})
    assert env["CUDA_VISIBLE_DEVICES"] == ""  # the CPU: no GPU at all


@pytest.mark.proc
def test_the_nvml_seam_reaches_the_processes_the_lab_starts(tmp_path):
    env = dict(
        os.environ,
        LAB_NVML_MODULE="tests.fake_nvml",
        LAB_TEST_FAKE_GPUS="4",
        LAB_RUNS_DIR=str(tmp_path),
    )
    r = subprocess.run(
        [sys.executable, "-m", "lab", "gpus", "--json"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    snap = json.loads(r.stdout)
    assert [g["index"] for g in snap["gpus"]] == [0, 1, 2, 3] and snap["reason"] is None
    assert len({g["uuid"] for g in snap["gpus"]}) == 4
    env["LAB_TEST_FAKE_GPUS"] = "none"
    r = subprocess.run(
        [sys.executable, "-m", "lab", "gpus"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and r.stdout.startswith(devices.NO_DRIVER)
