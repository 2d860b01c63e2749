"""The seeds' pre-flight checks in lab/engine/preflight/checks.py and their refusals through
lab/engine/launch/config.py.

FAKE: NVIDIA GPUs and their driver are faked (tests/fake_nvml.py in place of
``pynvml``; this machine has none). Real: PyTorch's own CUDA version, the
memory estimate (the chosen model measured by lab/engine/preflight/estimate.py), the
launcher's refusal (nothing created, nothing started).
"""

from __future__ import annotations

import psutil
import pytest

from lab.engine.devices import nvml as devices
from lab.engine.launch import launcher
from lab.engine.launch.config import problems, validate
from lab.engine.preflight import estimate
from lab.engine.preflight.checks import (
    CONTEXT_MIB,
    MachineFacts,
    machine_facts,
    preflight,
    refusals,
)
from lab.engine.spec.run import ConfigError, RunConfig
from tests.fake_nvml import FakeGpu, FakeNvml

TORCH_CUDA = estimate.torch_cuda_version()
needs_cuda_build = pytest.mark.skipif(TORCH_CUDA is None, reason="this PyTorch is a CPU-only build")


@pytest.fixture
def fake(monkeypatch):
    def install(gpus, cuda_driver=None):
        major, minor = TORCH_CUDA or (12, 4)
        mod = FakeNvml(gpus, cuda_driver=cuda_driver or major * 1000 + minor * 10)
        monkeypatch.setattr(devices, "pynvml", mod)
        return mod

    return install


def _check(config: RunConfig) -> tuple[list[ConfigError], list[str]]:
    """What a launch would refuse, and the lines the Launch page shows, on the faked machine."""
    snap = devices.snapshot()
    return problems(config, devices.gpu_count(), machine_facts(config)), preflight(config, snap)


@needs_cuda_build
def test_driver_older_than_pytorchs_cuda_major_is_refused(fake):
    major, minor = TORCH_CUDA
    fake([FakeGpu()], cuda_driver=(major - 1) * 1000 + 40)
    errs, lines = _check(RunConfig(gpus=(0,)))
    assert [e.field for e in errs] == ["gpus"]
    assert (
        f"supports CUDA up to {major - 1}.4 but this PyTorch is built for CUDA {major}.{minor}"
        in errs[0].message
    )
    assert "update the driver" in errs[0].message
    assert any(ln.startswith("Refused: the NVIDIA driver") for ln in lines)
    assert problems(RunConfig(), 1, machine_facts(RunConfig())) == []  # the CPU needs no driver


def test_driver_older_only_in_the_minor_version_is_a_warning(fake, monkeypatch):
    # this machine's PyTorch has no minor to lag
    monkeypatch.setattr(estimate, "torch_cuda_version", lambda: (12, 4))
    # a newer driver runs older CUDA builds
    for driver, warned in ((12020, 1), (12040, 0), (13000, 0)):
        fake([FakeGpu()], cuda_driver=driver)
        errs, lines = _check(RunConfig(gpus=(0,)))
        assert errs == []
        found = [ln for ln in lines if ln.startswith("Warning: the NVIDIA driver")]
        assert len(found) == warned, lines
        assert all(
            "supports CUDA 12.2, older than the 12.4" in ln and "update the driver" in ln
            for ln in found
        )


def test_dp_asking_for_more_gpus_than_visible_is_refused(fake):
    fake([FakeGpu(), FakeGpu()])
    errs = problems(RunConfig(mode="dp", gpus=(0, 1, 2)), devices.gpu_count())
    assert any(
        "dp asks for 3 GPUs but 2 are visible" in e.message and "pick at most 2" in e.message
        for e in errs
    )
    assert (
        problems(RunConfig(mode="dp", gpus=(0, 1)), devices.gpu_count(), machine_facts(RunConfig()))
        == []
    )


def test_free_memory_below_the_estimate_is_refused_and_the_launch_starts_nothing(fake, tmp_path):
    cfg = RunConfig(
        model="resnet18", dataset="synthetic", gpus=(1,), batch_size=256, image_size=224
    )
    need = estimate.per_gpu(cfg)[1].total_mib  # about 5.4 GiB of activations + 3 x 43 MiB
    # 100 MiB short on GPU 1
    fake([FakeGpu(mem_used_mib=500), FakeGpu(mem_used_mib=81559 - int(need) + 100)])
    errs, lines = _check(cfg)
    assert [e.field for e in errs] == ["batch_size"]
    free = estimate.mib_text(81559 - (81559 - int(need) + 100))
    assert errs[0].message.startswith(
        f"GPU 1 has {free} free but this run needs at least {estimate.mib_text(need)}"
    )
    assert (
        "activations of 256 images" in errs[0].message and "lower the batch size" in errs[0].message
    )
    assert any(ln.startswith("Refused: GPU 1 has") for ln in lines)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(ConfigError) as e:
        launcher.launch(cfg, tmp_path / "runs")
    assert e.value.field == "batch_size"
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_free_memory_just_above_the_estimate_warns_and_ample_memory_says_nothing(fake):
    cfg = RunConfig(
        mode="ddp", gpus=(0, 1), nproc=2, model="resnet18", batch_size=128, image_size=64
    )
    need = estimate.per_gpu(cfg)[0].total_mib
    fake([FakeGpu(mem_used_mib=int(81559 - need - CONTEXT_MIB / 2)), FakeGpu(mem_used_mib=0)])
    errs, lines = _check(cfg)
    assert errs == []
    warned = [ln for ln in lines if ln.startswith("Warning: GPU 0 has")]
    assert len(warned) == 1 and "CUDA context" in warned[0]
    assert not any(ln.startswith("Warning: GPU 1") for ln in lines)
    memory = [ln for ln in lines if ln.startswith("Memory:")]
    assert memory == [
        f"Memory: at least {estimate.mib_text(need)} on GPU 0, 1 "
        f"({estimate.per_gpu(cfg)[0].describe()}), "
        "before the CUDA context."
    ]


def test_dp_first_gpu_needs_more_than_the_others(fake):
    fake([FakeGpu(), FakeGpu()])
    facts = machine_facts(RunConfig(mode="dp", gpus=(0, 1), model="resnet18", batch_size=64))
    assert facts.need_mib[0] > facts.need_mib[1] and set(facts.free_mib) == {0, 1}


def test_loopback_rendezvous_with_several_nodes_is_a_warning():
    snap = devices.snapshot()
    for endpoint in ("127.0.0.1:29400", "localhost:29400", "[::1]:29400", "127.0.1.1:29400"):
        cfg = RunConfig(mode="ddp", nproc=1, nnodes=2, rdzv_endpoint=endpoint)
        # two nodes on one machine is a fair test: not refused
        assert problems(cfg, 0, machine_facts(cfg)) == []
        assert any(
            ln.startswith("Warning: the rendezvous host") and "loopback" in ln
            for ln in preflight(cfg, snap)
        )
    for endpoint in ("10.0.0.1:29400", "node0.cluster:29400"):
        cfg = RunConfig(mode="ddp", nproc=1, nnodes=2, rdzv_endpoint=endpoint)
        assert not any("loopback" in ln for ln in preflight(cfg, snap))


def test_a_gpu_busy_with_another_process_is_a_warning(fake):
    # a process that exists here, so it is named as one (not a run of ours)
    other = psutil.Process().pid
    fake([FakeGpu(processes=[(4242, 3072)]), FakeGpu(processes=[(other, 1024)])])
    errs, lines = _check(RunConfig(gpus=(1,)))
    assert errs == []
    warned = [ln for ln in lines if ln.startswith("Warning: GPU")]
    assert warned == [
        f"Warning: GPU 1 is already in use (process {other} (not a run) holds 1.0 GiB on GPU 1): "
        "the run "
        "will share its memory and compute (slower, and out of memory if both grow); pick a free "
        "GPU or "
        "stop that process first."
    ]


def test_cpu_runs_read_no_machine_facts(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("a CPU run must not read GPUs or estimate memory")

    monkeypatch.setattr(devices, "read_gpus", boom)
    monkeypatch.setattr(estimate, "per_gpu", boom)
    monkeypatch.setattr(estimate, "estimate", boom)
    room = 100 * 1024**3  # the runs folder's disk is read (preflight/disk.py): room for any run
    facts = machine_facts(RunConfig(mode="ddp", nproc=2), free=lambda folder: room)
    assert facts == MachineFacts(disk_folder=facts.disk_folder, disk_free=room)


def test_refusals_need_facts_to_refuse():
    cfg = RunConfig(gpus=(0,))
    assert refusals(cfg, MachineFacts()) == []
    facts = MachineFacts(
        driver_cuda=(11, 4), torch_cuda=(12, 1), free_mib={0: 100.0}, need_mib={0: 200.0}
    )
    assert [e.field for e in refusals(cfg, facts)] == ["gpus", "batch_size"]
    with pytest.raises(ConfigError):
        validate(cfg, 1, facts)
    validate(cfg, 1)  # without the facts nothing of the machine is refused


def test_launch_page_shows_the_refusal_and_the_button_starts_nothing(fake, runs_dir):
    """The Launch page as a user meets it (AppTest), with one faked GPU nearly full."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from lab.runfolder import REPO_ROOT

    fake([FakeGpu(mem_used_mib=81559 - 1000)])  # 1000 MiB free
    st.cache_data.clear()  # the page caches the device snapshot for a few seconds
    try:
        at = AppTest.from_file(str(REPO_ROOT / "pages" / "1_Launch.py"), default_timeout=60)
        at.run()
        at.selectbox(key="launch_model").set_value("resnet18")
        at.number_input(key="launch_image_size").set_value(224)
        at.run()
        assert not at.exception, at.exception
        # Refused as launch refuses it: next to its field and in the list to fix, with no command
        # offered.
        assert any(
            e.value.startswith("GPU 0 has 1000 MiB free but this run needs at least")
            for e in at.error
        ), [e.value for e in at.error]
        fix = [w.value for w in at.warning if w.value.startswith("Fix before launching")]
        assert fix and "GPU 0 has 1000 MiB free" in fix[0], [w.value for w in at.warning]
        assert not at.code, "a refused run shows no command to run"
        at.button(key="launch_go").click()
        at.run()
        assert "Not launched: fix the fields marked in red first." in [e.value for e in at.error]
        assert not list(runs_dir.iterdir())
    finally:
        st.cache_data.clear()


def test_dry_run_refuses_what_launch_refuses(fake, runs_dir, capsys):
    """``launch --dry-run`` on the faked full GPU: the launch's one-line refusal, exit 2, nothing
    created."""
    from lab import cli

    fake([FakeGpu(mem_used_mib=81559 - 1000)])
    argv = ["launch", "--gpus", "0", "--model", "resnet18", "--image-size", "224", "--dry-run"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: ") and "GPU 0 has 1000 MiB free but this run needs at least" in err
    ), err
    assert not list(runs_dir.iterdir())
    fake([FakeGpu()])  # the same with the GPU free: the dry run shows the command
    assert cli.main(argv) == 0
    assert "training.train" in capsys.readouterr().out
