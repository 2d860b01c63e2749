"""The link check's timing, as nccl-tests times: a barrier, then the iterations back to back,
timed once; the mean and the maximum over ranks both reported (an in-process gloo group)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from training import linkcheck


def test_a_barrier_then_iterations_back_to_back_timed_once():
    events: list[str] = []
    ticks = iter([10.0, 10.5])  # the clock is read exactly twice: start and end

    def clock() -> float:
        events.append("clock")
        return next(ticks)

    per = linkcheck.time_iters(
        lambda: events.append("op"),
        5,
        torch.device("cpu"),
        barrier=lambda: events.append("barrier"),
        clock=clock,
    )
    assert events == ["barrier", "clock"] + ["op"] * 5 + ["clock"]
    assert per == 0.1  # 0.5 s over 5 calls


def test_the_worker_reports_mean_and_slowest_rank(tmp_path, monkeypatch):
    from tests.helpers.train_ddp import free_port

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "lc.json"
    argv = ["--out", str(out), "--max-bytes", "4096", "--factor", "4", "--iters", "3"]
    assert linkcheck.main(argv) == 0
    assert not dist.is_initialized()
    import json

    got = json.loads(out.read_text())
    assert got["timing"] == linkcheck.TIMING
    for r in got["results"]:
        assert r["max_time_ms"] >= r["time_ms"] > 0  # one rank: both its own
    rows = linkcheck.row(1000, 0.001, 2, 0.004)
    assert rows["time_ms"] == 1.0 and rows["max_time_ms"] == 4.0
    assert rows["algbw_gbps"] == 0.001  # from the mean, as nccl-tests


def test_a_runs_link_share_uses_only_a_check_of_its_gpus_node_count_and_nccl_variables(tmp_path):
    from types import SimpleNamespace

    from lab.runfolder import LINKCHECKS_DIR, write_json_atomic
    from lab.views.compare import linkshare

    (tmp_path / LINKCHECKS_DIR).mkdir()

    def check(check_id, gpus, env):
        write_json_atomic(
            tmp_path / LINKCHECKS_DIR / f"{check_id}.json",
            {"id": check_id, "backend": "nccl", "world_size": 2, "gpus": gpus, "nccl_env": env,
             "results": [{"bytes": 2**20, "time_ms": 1.0, "algbw_gbps": 2.0, "busbw_gbps": 2.0}]},
        )  # fmt: skip

    prof = {"collectives": [{"op": "all_reduce", "rank": 0, "calls": 1.0, "bytes": 2**20,
                             "total_ms": 1.0, "algbw_gbps": 1.0, "busbw_gbps": 1.0}]}  # fmt: skip
    check("20250101-000000-nccl-2-aaaa", [0, 1], {})
    check("20250102-000000-nccl-2-bbbb", [2, 3], {"NCCL_DEBUG": "INFO"})  # logging aside: same
    check("20250103-000000-nccl-2-cccc", [2, 3], {"NCCL_ALGO": "Ring"})  # another preset
    got = linkshare.share(prof, "nccl", 2, tmp_path, gpus=[2, 3], nccl_env={})
    assert got["check_id"] == "20250102-000000-nccl-2-bbbb"
    assert linkshare.share(prof, "nccl", 2, tmp_path, gpus=[0, 1], nccl_env={})["check_id"] == (
        "20250101-000000-nccl-2-aaaa"
    )
    assert linkshare.share(prof, "nccl", 2, tmp_path, gpus=[4, 5], nccl_env={}) is None
    assert linkshare.share(prof, "nccl", 2, tmp_path, gpus=[0, 1], nnodes=2) is None

    opts = {"gpus": [4, 5], "nnodes": 1}
    run = SimpleNamespace(
        summary={"backend": "nccl", "nccl_env": {}},
        run_dir=str(tmp_path / "r"),
        option=opts.get,
    )
    row = SimpleNamespace(
        name="ddp x2", run=run, figures=SimpleNamespace(profile=prof, world_size=2, devices=[])
    )
    (line,) = linkshare.lines(SimpleNamespace(rows=(row,)))
    assert line.startswith("ddp x2: no link check of the same GPUs, one node")
