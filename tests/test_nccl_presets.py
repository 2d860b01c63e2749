"""NCCL presets: one-machine presets refused on several nodes, the debug preset's log file in the
run folder and its not-for-timing mark, p2p-off, and every NCCL_* variable, the NCCL version and
TF32 recorded (run.json, summary.json)."""

from __future__ import annotations

import json

import torch

from lab.engine.launch import launcher
from lab.engine.launch.knobs import knob_problems
from lab.engine.spec import nccl
from lab.engine.spec.run import RunConfig
from training import knobs


def test_single_node_nvlink_is_refused_on_several_nodes_in_one_line():
    two = knob_problems(RunConfig(mode="ddp", nproc=2, nnodes=2, nccl_preset="single-node-nvlink"))
    (line,) = [m for f, m in two if f == "nccl_preset"]
    assert "InfiniBand" in line and "2 nodes" in line and "no-infiniband" in line
    assert "\\n" not in line
    one = knob_problems(RunConfig(mode="ddp", nproc=2, nccl_preset="single-node-nvlink"))
    assert not [m for f, m in one if f == "nccl_preset"]
    assert nccl.preset_problem("no-infiniband", 4) is None


def test_p2p_off_turns_peer_to_peer_off():
    assert nccl.preset_env("p2p-off") == {"NCCL_P2P_DISABLE": "1"}
    assert nccl.preset_problem("p2p-off") is None


def test_debug_logs_set_up_to_a_file_in_the_run_folder_and_is_not_for_timing(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth0")  # the launcher's own environment counts
    c = RunConfig(mode="ddp", nproc=2, nccl_preset="debug")
    run_id = launcher.new_run(c, tmp_path, None, "test box")
    record = json.loads((tmp_path / run_id / "run.json").read_text())
    env = record["env"]
    assert env["NCCL_DEBUG_SUBSYS"] == "INIT,ENV,GRAPH,TUNING" and "COLL" not in env.values()
    assert env["NCCL_DEBUG_FILE"] == str(tmp_path / run_id / "nccl-debug.%h.%p.log")
    assert record["not_for_timing"] == nccl.NOT_FOR_TIMING["debug"]
    assert record["nccl_env"]["NCCL_SOCKET_IFNAME"] == "eth0"
    assert record["nccl_env"]["NCCL_DEBUG"] == "INFO"
    assert all(k.startswith("NCCL_") for k in record["nccl_env"])
    plain = launcher.new_run(RunConfig(mode="ddp", nproc=2), tmp_path, None, "test box")
    plain_rec = json.loads((tmp_path / plain / "run.json").read_text())
    assert "not_for_timing" not in plain_rec
    assert plain_rec["nccl_env"] == {"NCCL_SOCKET_IFNAME": "eth0"}


def test_the_trainer_records_tf32_and_the_nccl_variables():
    was = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = not was
        got = knobs.numerics_record({"NCCL_ALGO": "Ring", "PATH": "/bin"})
        assert got["tf32"]["matmul"] is (not was)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = was
    assert got["tf32"]["cudnn"] is bool(torch.backends.cudnn.allow_tf32)
    assert got["nccl_env"] == {"NCCL_ALGO": "Ring"}
    assert got["nccl_version"] is None or got["nccl_version"][0].isdigit()


def test_the_preflight_suggests_p2p_off_where_nvml_says_p2p_is_not_ok(monkeypatch):
    from lab.engine.devices import nvml as devices
    from lab.engine.preflight.checks import machine_facts, warning_lines
    from tests.fake_nvml import FakeNvml, fake_gpus

    monkeypatch.setattr(devices, "pynvml", FakeNvml(fake_gpus(4)))  # 0-3 and 1-2: no P2P
    snap = devices.DeviceSnapshot(gpus=(), cpu=None, reason="", taken_at=0.0)

    def lines(**kw):
        c = RunConfig(mode="ddp", nproc=2, **kw)
        return [x for x in warning_lines(c, snap, machine_facts(c, gpus=())) if "p2p-off" in x]

    (line,) = lines(gpus=(0, 3))
    assert "0-3 (TNS)" in line and "NCCL_P2P_DISABLE=1" in line
    assert lines(gpus=(0, 1)) == []  # OK between them
    assert lines(gpus=(0, 3), nccl_preset="p2p-off") == []
