"""The links between GPUs: topology (``lab gpus --json``, run.json) and link traffic (``sys/``).

FAKE: this machine has no GPU; the NVML answers come from tests/fake_nvml.py (``fake_gpus(4)``:
GPUs 0-1 and 2-3 are NVLink pairs of 2 links, 0-2 and 1-3 meet at a host bridge, 0-3 and 1-2
across the sockets without peer-to-peer; GPU 3 gives no PCIe throughput and GPUs 2-3 no NVLink
counters). The calls and constants are the real nvidia-ml-py names.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from lab.engine.devices import links
from lab.engine.devices import nvml as devices
from lab.runfolder import REPO_ROOT, read_json
from tests.fake_nvml import NVML_TOPOLOGY_HOSTBRIDGE, FakeGpu, FakeNvml, fake_gpus

FOUR = [
    ["X", "NV2", "PHB", "SYS"],
    ["NV2", "X", "SYS", "PHB"],
    ["PHB", "SYS", "X", "NV2"],
    ["SYS", "PHB", "NV2", "X"],
]
FOUR_P2P = [
    ["X", "OK", "OK", "TNS"],
    ["OK", "X", "TNS", "OK"],
    ["OK", "TNS", "X", "OK"],
    ["TNS", "OK", "OK", "X"],
]


@pytest.fixture
def fake(monkeypatch):
    def install(gpus, no_driver=False):
        mod = FakeNvml(gpus, no_driver)
        monkeypatch.setattr(devices, "pynvml", mod)
        return mod

    return install


def _env(runs_dir, gpus: str) -> dict:
    return dict(
        os.environ,
        LAB_NVML_MODULE="tests.fake_nvml",
        LAB_TEST_FAKE_GPUS=gpus,
        LAB_RUNS_DIR=str(runs_dir),
        LAB_SAMPLE_INTERVAL_S="0.2",
        OMP_NUM_THREADS="1",
    )


def _lab(runs_dir, gpus: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lab", *args],
        cwd=REPO_ROOT,
        env=_env(runs_dir, gpus),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_topology_matrix_of_four_fake_gpus(fake):
    fake(fake_gpus(4))
    topo, why = links.topology()
    assert why is None
    assert topo == {"gpus": [0, 1, 2, 3], "links": FOUR, "p2p": FOUR_P2P, "notes": []}
    sub, _ = links.topology((1, 3))  # a run's GPUs only
    assert sub["gpus"] == [1, 3] and sub["links"] == [["X", "PHB"], ["PHB", "X"]]


def test_topology_through_an_nvswitch_and_unreadable_pairs(fake):
    # GPUs 0 and 1 each have 4 links to a switch (a PCI address no GPU has); GPU 2 has no NVLink,
    # and its PCIe path and peer-to-peer status are not supported
    gpus = [FakeGpu(), FakeGpu(), FakeGpu(unsupported={"nvlink", "topology", "p2p"})]
    nv = fake(gpus)
    switch = FakeGpu()
    nv.gpus.append(switch)  # the far end's PCI address, then hidden from the GPU count
    gpus[0].nvlinks = gpus[1].nvlinks = {3: 4}
    gpus[0].levels = {2: NVML_TOPOLOGY_HOSTBRIDGE}
    nv.nvmlDeviceGetCount = lambda: 3
    topo, _ = links.topology()
    assert topo["links"] == [["X", "NV4", "PHB"], ["NV4", "X", "SYS"], ["?", "?", "X"]]
    assert topo["p2p"][2] == ["U", "U", "X"] and topo["p2p"][0] == ["X", "OK", "OK"]
    assert topo["notes"] == []  # only a < b pairs are noted, and those were read
    two, _ = links.topology((0, 2))
    assert two["notes"] == []
    gpus[0].unsupported = {"topology", "p2p"}
    noted, _ = links.topology((0, 2))
    assert noted["notes"] == [
        "GPU 0-2: PCIe path not readable (not supported)",
        "GPU 0-2: peer-to-peer status not readable (not supported)",
    ]


def test_no_gpu_no_topology_and_the_reason(fake):
    fake([], no_driver=True)
    assert links.topology_record() == {"topology": None, "topology_note": devices.NO_DRIVER}


@pytest.mark.proc
def test_lab_gpus_json_has_the_matrix(runs_dir):
    r = _lab(runs_dir, "4", "gpus", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["topology"]["gpus"] == [0, 1, 2, 3] and out["topology_note"] is None
    assert out["topology"]["links"] == FOUR and out["topology"]["p2p"] == FOUR_P2P
    text = _lab(runs_dir, "4", "gpus")
    assert (
        "GPU 0          X              NV2            PHB            SYS · P2P TNS" in text.stdout
    )
    r = _lab(runs_dir, "none", "gpus", "--json")
    out = json.loads(r.stdout)
    assert out["topology"] is None and out["topology_note"] == devices.NO_DRIVER


def test_sampler_records_pcie_and_nvlink_and_notes_the_unsupported(fake, tmp_path):
    from lab.engine.supervise.sampler import SysSampler

    fake(fake_gpus(4))
    s = SysSampler(tmp_path, gpus=(0, 1, 2, 3))
    first = s.sample([psutil.Process()])
    time.sleep(0.3)
    vals = s.sample([psutil.Process()])
    s.close()
    # PCIe from byte counters: a rate from the second sample; GPU 2 has only the 20 ms snapshot
    assert "sys/gpu1/pcie_rx_mib_s" not in first and first["sys/gpu2/pcie_rx_mib_s"] == 300.0
    assert "sys/gpu0/nvlink_rx_mib_s" not in first
    assert vals["sys/gpu0/pcie_rx_mib_s"] == pytest.approx(100, rel=0.05)  # Δbytes/Δt
    assert vals["sys/gpu1/pcie_tx_mib_s"] == pytest.approx(100, rel=0.05)
    assert vals["sys/gpu2/pcie_tx_mib_s"] == 150.0
    assert vals["sys/gpu0/nvlink_rx_mib_s"] == pytest.approx(1024, rel=0.05)  # a counter's rate
    assert vals["sys/gpu1/nvlink_tx_mib_s"] == pytest.approx(1024, rel=0.05)
    # GPU 2's throughput fields say NotSupported: its per-link byte counters, summed
    assert vals["sys/gpu2/nvlink_rx_mib_s"] == pytest.approx(1024, rel=0.05)
    assert not any(t.startswith(("sys/gpu3/pcie", "sys/gpu3/nvlink")) for t in vals)
    assert s.interference()["link_note"] == (
        "GPU 2: PCIe is NVML's 20 ms snapshot (no byte counters); "
        "GPU 3: NVLink throughput not supported; GPU 3: PCIe throughput not supported"
    )


def _sys_tags(run_dir) -> set[str]:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    tags: set[str] = set()
    for f in glob.glob(f"{run_dir}/sys/events.out.tfevents.*"):
        tags |= {v.tag for ev in EventFileLoader(f).Load() for v in ev.summary.value}
    return tags


@pytest.mark.proc
def test_a_supervised_run_records_the_pcie_tags_and_its_topology(runs_dir):
    script = runs_dir.parent / "nap.py"
    script.write_text("import time\ntime.sleep(2.5)\nprint('done')\n")
    r = _lab(
        runs_dir, "4", "launch", "--script", str(script), "--mode", "dp", "--gpus", "0,3", "--json"
    )
    assert r.returncode == 0, r.stderr
    run_id = json.loads(r.stdout)["run_id"]
    end = time.monotonic() + 90
    while time.monotonic() < end:
        st = read_json(runs_dir / run_id / "status.json") or {}
        if st.get("state") in ("succeeded", "failed", "stopped"):
            break
        time.sleep(0.2)
    assert st.get("state") == "succeeded", st
    tags = _sys_tags(runs_dir / run_id)
    assert {"sys/gpu0/pcie_rx_mib_s", "sys/gpu0/pcie_tx_mib_s", "sys/gpu0/nvlink_rx_mib_s"} <= tags
    assert "sys/gpu3/pcie_rx_mib_s" not in tags and "sys/gpu3/util_pct" in tags
    note = st["interference"]["link_note"]
    assert "GPU 3: PCIe throughput not supported" in note and "GPU 0" not in note
    run = read_json(runs_dir / run_id / "run.json")
    assert run["topology"]["gpus"] == [0, 3]
    assert run["topology"]["links"] == [["X", "SYS"], ["SYS", "X"]]
    assert run["topology"]["p2p"] == [["X", "TNS"], ["TNS", "X"]]


def test_sampler_records_sm_activity_where_gpm_is_supported_and_frees_its_samples(fake, tmp_path):
    """Fake NVML (no GPU here): GPU 0 has GPM (Hopper), GPU 1 not: utilisation only."""
    from lab.engine.supervise.sampler import SysSampler

    gpus = fake_gpus(2)
    gpus[0].sm_active, gpus[1].unsupported = 62.5, gpus[1].unsupported | {"gpm"}
    mod = fake(gpus)
    s = SysSampler(tmp_path, gpus=(0, 1))
    first = s.sample([psutil.Process()])
    gpus[0].sm_active = 12.0
    second = s.sample([psutil.Process()])
    assert "sys/gpu0/sm_active_pct" not in first  # GPM needs two samples
    assert second["sys/gpu0/sm_active_pct"] == 12.0 and "sys/gpu0/util_pct" in second
    assert not any("sm_active" in t for t in {**first, **second} if t.startswith("sys/gpu1/"))
    assert mod.calls.count("gpm_support") == 2  # asked once per GPU, not every sample
    s.close()
    assert mod.gpm_live == 0
