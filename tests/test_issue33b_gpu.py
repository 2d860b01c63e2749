"""Issue 33's GPU-only items of the second pass, on real NVIDIA GPUs (marked ``gpu``: skipped where
there is none; run by ``scripts/gpu_check.py``'s ``pytest -m gpu`` step).

Written without a GPU to run them on: PCIe throughput from NVML's byte counters (or the snapshot,
labelled); the link check timed as nccl-tests with NCCL's transports parsed and the debug preset's
log file in the run folder; the NCCL version and TF32 recorded; DataParallel's broadcast and
reduce-add bytes from its ops' shapes and each call's minimum over ranks in a profiled run; SM
activity from GPM and the compute capability NVML reports.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.gpu


def _two_gpus() -> int:
    import torch

    n = torch.cuda.device_count()
    if n < 2:
        pytest.skip("needs two GPUs")
    return n


def test_pcie_from_byte_counters_or_a_labelled_snapshot():
    from lab.engine.devices import links

    meter = links.LinkMeter()
    meter.sample((0,))
    time.sleep(0.5)
    vals = meter.sample((0,))
    note = meter.note() or ""
    assert "sys/gpu0/pcie_rx_mib_s" in vals or "GPU 0: PCIe throughput" in note, (vals, note)
    if "sys/gpu0/pcie_rx_mib_s" in vals:
        assert vals["sys/gpu0/pcie_rx_mib_s"] >= 0
    print("PCIe:", "snapshot" if "snapshot" in note else "byte counters", vals, note)


def test_sm_activity_from_gpm_on_hopper_and_newer_and_the_compute_capability():
    import torch

    from lab.engine.devices import nvml
    from lab.engine.devices.sm_activity import SmActivity

    cc = torch.cuda.get_device_capability(0)
    assert nvml.compute_capability(0) == cc  # NVML and torch agree (CUDA_DEVICE_ORDER=PCI_BUS_ID)
    meter = SmActivity()
    meter.read(0)
    x = torch.randn(4096, 4096, device="cuda:0")
    t = time.monotonic()
    while time.monotonic() - t < 1.0:
        x = (x @ x).tanh()
    torch.cuda.synchronize()
    busy = meter.read(0)
    meter.close()
    if cc < (9, 0):
        assert busy is None  # GPM is Hopper's and newer
    else:
        assert busy is not None and 0 < busy <= 100, busy
    print("compute capability", cc, "SM activity under a matmul loop:", busy)


def test_nccl_version_and_tf32_are_recorded():
    from training import knobs

    got = knobs.numerics_record()
    assert got["nccl_version"] and got["nccl_version"][0].isdigit(), got
    assert set(got["tf32"]) == {"matmul", "cudnn"}


# proc: one short link check on two GPUs under torchrun, with the debug preset's variables
def test_link_check_timing_transports_and_the_debug_log_file(tmp_path, monkeypatch):
    from lab.engine import linkcheck, nccl_transports
    from lab.engine.spec import nccl

    _two_gpus()
    for k, v in nccl.preset_env("debug", tmp_path).items():
        monkeypatch.setenv(k, v)
    rec = linkcheck.run(tmp_path, linkcheck.plan(None, 2, (0, 1)), max_bytes=1 << 20)
    assert rec["timing"] and all(r["max_time_ms"] >= r["time_ms"] > 0 for r in rec["results"])
    logs = list(tmp_path.glob("nccl-debug.*.log"))
    assert logs, "NCCL_DEBUG_FILE wrote nothing in the run folder"
    parsed = nccl_transports.parse("".join(p.read_text(errors="replace") for p in logs))
    assert parsed["transports"], parsed  # P2P, SHM or NET: what NCCL chose here
    print("transports:", parsed["transports"], "NCCL", parsed["nccl_version"])


# proc: a short DataParallel run over two GPUs with a profile window
def test_dp_collectives_have_bytes_from_the_ops_shapes(tmp_path):
    _two_gpus()
    run = tmp_path / "dp"
    argv = [sys.executable, "-m", "training.train", "--device", "cuda", "--dataset", "synthetic"]
    argv += ["--mode", "dp", "--batch-size", "64", "--image-size", "16", "--max-steps", "4"]
    argv += ["--profile-steps", "2:4", "--checkpoint", "none", "--log-dir", str(run)]
    res = subprocess.run(
        argv,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "0,1"},
    )
    assert res.returncode == 0, res.stderr[-2000:]
    b = json.loads((run / "profile" / "breakdown.json").read_text())
    rows = {r["op"]: r for r in b["collectives"]}
    with gzip.open(run / "profile" / "trace_rank0.json.gz", "rt") as f:
        names = {e.get("name") for e in json.load(f).get("traceEvents", [])}
    assert {"Broadcast", "ReduceAddCoalesced"} & names, "DP's ops not in the trace"
    for op in ("broadcast", "reduce"):
        if op in rows:
            assert rows[op]["bytes"] > 0 and rows[op]["algbw_gbps"] > 0, rows[op]
    assert "collectives_min" in b
    print("DP collectives:", rows)
