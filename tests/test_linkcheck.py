"""The link check (``lab linkcheck``): real gloo all-reduces under torchrun on the CPU, the saved
record, the refusals, the launcher's waiting with a timeout, and Compare's share of the checked
bus bandwidth."""

from __future__ import annotations

import json
import os
import sys
import time
from types import SimpleNamespace

import pytest

from lab.engine import linkcheck, procs
from lab.runfolder import LINKCHECKS_DIR, read_json, write_json_atomic
from lab.views.compare import linkshare
from tests.helpers.cli import run_lab

CPU_BOX = {"LAB_NVML_MODULE": "tests.fake_nvml", "LAB_TEST_FAKE_GPUS": "none"}
ONE_THREAD_BOX = {"OMP_NUM_THREADS": "1", **CPU_BOX}  # every lab command here


@pytest.mark.proc
def test_linkcheck_nproc_2_json_from_real_gloo_all_reduces(runs_dir):
    r = run_lab(
        runs_dir,
        "linkcheck",
        "--nproc",
        "2",
        "--max-mib",
        "4",
        "--model",
        "tinycnn",
        "--json",
        OMP_NUM_THREADS="1",
        **CPU_BOX,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["backend"] == "gloo" and out["world_size"] == 2 and out["gpus"] == []
    assert out["topology"] is None and "CPU" in out["topology_note"]
    sizes = [row["bytes"] for row in out["results"]]
    assert sizes == [1024 * 4**k for k in range(7)]  # 1 KiB to 4 MiB, quadrupling
    for row in out["results"]:
        assert row["time_ms"] > 0 and row["busbw_gbps"] > 0
        # nccl-tests: algbw = bytes / time; busbw = algbw x 2(n-1)/n, which is 1 for n = 2
        assert row["algbw_gbps"] == pytest.approx(
            row["bytes"] / row["time_ms"] / 1e6, rel=0.01, abs=1e-5
        )
        assert row["busbw_gbps"] == row["algbw_gbps"]
    # fsdp's sizes of tinycnn (built for 3 channels, 10 classes): each unit's float32 parameters
    assert out["model"] == "tinycnn" and [u["name"] for u in out["units"]] == ["features", "head"]
    unit_bytes = sorted(u["bytes"] for u in out["units"])
    for op in ("all_gather", "reduce_scatter"):
        assert [row["bytes"] for row in out[op]] == unit_bytes
        for row in out[op]:  # busbw = algbw x (n-1)/n
            assert row["time_ms"] > 0 and row["busbw_gbps"] == pytest.approx(
                row["algbw_gbps"] / 2, abs=1e-5
            )
    saved = runs_dir / LINKCHECKS_DIR / f"{out['id']}.json"
    assert read_json(saved) == out
    assert (
        linkcheck.latest(runs_dir, "gloo", 2) == out
        and linkcheck.latest(runs_dir, "gloo", 4) is None
    )
    # the link checks' folder is not a run
    assert run_lab(runs_dir, "status", "--json", **ONE_THREAD_BOX).stdout.strip() in (
        "[]",
        "",
    )
    # the record and the output, nothing half-written; torchrun's rank folders went with the check
    # (given no --log-dir, torchrun leaves an empty folder in /tmp for good)
    left = sorted(p.name for p in (runs_dir / LINKCHECKS_DIR).iterdir())
    assert left == [f"{out['id']}.json", f"{out['id']}.log"], left


@pytest.mark.proc
def test_linkcheck_text_prints_every_size_with_a_nonzero_bandwidth(runs_dir):
    r = run_lab(
        runs_dir, "linkcheck", "--nproc", "2", "--max-mib", "0.01", **ONE_THREAD_BOX
    )  # 1 KiB and 4 KiB
    assert r.returncode == 0, r.stderr
    head, columns, *rows = r.stdout.splitlines()
    assert head.startswith("All-reduce, gloo, 2 ranks on the CPU (saved as ")
    assert columns.split() == ["size", "time", "ms", "algbw", "GB/s", "busbw", "GB/s"]
    assert [row.split()[:2] for row in rows] == [["1", "KiB"], ["4", "KiB"]]
    # 4 significant figures: even a busy CPU's 1 KiB row reads above zero, never 0.000
    assert all(float(row.split()[3]) > 0 and float(row.split()[4]) > 0 for row in rows)


@pytest.mark.proc
@pytest.mark.parametrize(
    "args, words",
    [
        (["--nproc", "0"], "--nproc: a link check needs at least 2 processes, not 0"),
        (["--gpus", "0,1"], "--gpus: this machine has no GPU NVML can read"),
    ],
)
def test_refused_in_one_line(runs_dir, args, words):
    r = run_lab(runs_dir, "linkcheck", *args, timeout=60, **ONE_THREAD_BOX)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: ") and words in r.stderr
    assert not (runs_dir / LINKCHECKS_DIR).exists()  # refused before any file or process


def test_plan_picks_the_devices():
    four = (0, 1, 2, 3)
    assert linkcheck.plan(None, None, four) == linkcheck.Plan("nccl", 4, four)
    assert linkcheck.plan(None, 2, four) == linkcheck.Plan("nccl", 2, (0, 1))
    assert linkcheck.plan((3, 1), None, four) == linkcheck.Plan("nccl", 2, (1, 3))
    assert linkcheck.plan(None, None, ()) == linkcheck.Plan("gloo", 2, ())
    assert linkcheck.plan(None, 3, ()) == linkcheck.Plan("gloo", 3, ())
    assert linkcheck.plan(None, None, (0,)) == linkcheck.Plan("gloo", 2, ())  # one GPU: the CPU
    for gpus, nproc, words in [
        ((0, 5), None, "no GPU 5 here"),
        ((1,), None, "at least 2 GPUs"),
        (None, 8, "8 GPUs asked, this machine has 4"),
        (None, 1, "at least 2 processes"),
    ]:
        with pytest.raises(linkcheck.LinkCheckError, match=words):
            linkcheck.plan(gpus, nproc, four)


@pytest.mark.proc
def test_run_and_wait_ends_the_whole_group_on_a_timeout(tmp_path):
    from lab.engine.linkcheck import run_and_wait

    pid_file = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(c.pid))\n"
        "time.sleep(60)\n"
    )
    t = time.monotonic()
    rc = run_and_wait([sys.executable, "-c", code], dict(os.environ), tmp_path / "log", 3.0)
    assert rc is None and time.monotonic() - t < 15
    child = int(pid_file.read_text())
    assert procs.wait_until(lambda: not procs.alive(child), 5)
    assert (
        run_and_wait(
            [sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ), tmp_path / "log", 30
        )
        == 3
    )


# ---- Compare: the share of the checked bus bandwidth ------------------------------------------


def _check(root, busbw_by_size: dict[int, float], check_id: str, world_size: int = 2) -> None:
    (root / LINKCHECKS_DIR).mkdir(exist_ok=True)
    write_json_atomic(
        root / LINKCHECKS_DIR / f"{check_id}.json",
        {
            "id": check_id,
            "backend": "gloo",
            "world_size": world_size,
            "results": [
                {"bytes": b, "time_ms": 1.0, "algbw_gbps": v, "busbw_gbps": v}
                for b, v in busbw_by_size.items()
            ],
        },
    )


def _profile(busbw: tuple[float, float], nbytes: int = 3 * 2**20, calls: float = 3.0) -> dict:
    rows = [
        {
            "op": "all_reduce",
            "rank": r,
            "calls": calls,
            "bytes": nbytes,
            "total_ms": 5.0,
            "algbw_gbps": b,
            "busbw_gbps": b,
        }
        for r, b in enumerate(busbw)
    ]
    return {
        "collectives": rows
        + [
            {
                "op": "broadcast",
                "rank": 0,
                "calls": 1,
                "bytes": 8,
                "total_ms": 1.0,
                "busbw_gbps": 9.0,
            }
        ]
    }


def test_share_of_the_latest_check_at_the_nearest_size(tmp_path):
    assert linkshare.share(_profile((0.3, 0.5)), "gloo", 2, tmp_path) is None  # no check yet
    _check(tmp_path, {2**18: 0.5, 2**20: 2.0, 2**22: 4.0}, "20250101-000000-gloo-2-aaaa")
    _check(tmp_path, {2**18: 0.5, 2**20: 1.6, 2**22: 4.0}, "20250102-000000-gloo-2-bbbb")
    _check(tmp_path, {2**20: 9.0}, "20250103-000000-gloo-4-cccc", world_size=4)
    s = linkshare.share(_profile((0.3, 0.5)), "gloo", 2, tmp_path)
    # 1 MiB a call (3 MiB over 3 calls); the newer 2-rank check reached 1.6 GB/s there
    assert s == {
        "busbw_gbps": 0.4,
        "message_bytes": 2**20,
        "check_id": "20250102-000000-gloo-2-bbbb",
        "check_bytes": 2**20,
        "check_busbw_gbps": 1.6,
        "share": pytest.approx(0.25),
    }
    assert linkshare.share(_profile((0.3, 0.5)), "nccl", 2, tmp_path) is None  # other backend
    assert linkshare.share({"collectives": []}, "gloo", 2, tmp_path) is None
    line = linkshare.sentence("ddp x2", s)
    assert line == (
        "ddp x2: all-reduce at 0.4 GB/s bus bandwidth (1.00 MiB a call), 25% of the 1.6 GB/s the "
        "link check 20250102-000000-gloo-2-bbbb reached at 1.00 MiB"
    )


def test_lines_for_the_profiled_runs_of_a_comparison(tmp_path):
    _check(tmp_path, {2**20: 2.0}, "20250101-000000-gloo-2-aaaa")

    def row(name, profile, world_size, devices):
        run = SimpleNamespace(summary={"backend": "gloo"}, run_dir=str(tmp_path / name))
        figures = SimpleNamespace(profile=profile, world_size=world_size, devices=devices)
        return SimpleNamespace(name=name, run=run, figures=figures)

    c = SimpleNamespace(
        rows=(
            row("single", None, 1, ["cpu"]),
            row("ddp", _profile((1.0, 1.0)), 2, ["cpu:0", "cpu:1"]),
        )
    )
    assert linkshare.lines(c) == [
        "ddp: all-reduce at 1 GB/s bus bandwidth (1.00 MiB a call), 50% of the 2 GB/s the link "
        "check 20250101-000000-gloo-2-aaaa reached at 1.00 MiB"
    ]


def test_home_table_has_one_row_per_size_and_the_box_keeps_the_default():
    from lab.views import linkcheck as shown

    rec = {
        "id": "c1",
        "backend": "gloo",
        "world_size": 2,
        "gpus": [],
        "results": [
            {"bytes": 4096, "time_ms": 0.5, "algbw_gbps": 12.3456, "busbw_gbps": 12.3456},
            {"bytes": 1024, "time_ms": 2.5, "algbw_gbps": 0.00041234, "busbw_gbps": 0.00041234},
        ],
    }
    # four significant figures: the busy CPU's 1 KiB row is not rounded down to 0.000
    assert shown.rows(rec) == [
        {"bytes": 1024, "time_ms": 2.5, "algbw (GB/s)": 0.0004123, "busbw (GB/s)": 0.0004123},
        {"bytes": 4096, "time_ms": 0.5, "algbw (GB/s)": 12.35, "busbw (GB/s)": 12.35},
    ]
    assert shown.heading(rec) == "All-reduce, gloo, 2 ranks on the CPU (saved as c1)"
    assert "GPU 0, GPU 1" in shown.heading({**rec, "gpus": [0, 1], "backend": "nccl"})
    assert shown.rows({"results": None}) == []
    assert (shown.max_bytes(0), shown.max_bytes(0.5)) == (None, 512 * 1024)


def test_sizes_up_to_one_gib_on_request_and_no_further(capsys):
    """--max-mib 1024 reaches 1 GiB on both size ladders (doubling on GPUs, quadrupling on the
    CPU); above it, one line and nothing starts."""
    from lab.cli import main
    from lab.engine import linkcheck as engine
    from training.linkcheck import sizes

    top = engine.max_bytes_of(1024)
    assert top == 1 << 30
    assert sizes(top, factor=2)[-1] == 1 << 30 and sizes(top, factor=4)[-1] == 1 << 30
    with pytest.raises(engine.LinkCheckError, match="at most 1024 MiB"):
        engine.max_bytes_of(1025)
    assert main(["linkcheck", "--nproc", "2", "--max-mib", "2048"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--max-mib: at most 1024 MiB" in err[0]
