"""``--profile-steps`` for real: single, DataParallel (falling back here), 2-rank gloo DDP and
FSDP runs on the CPU.

Each run is a real ``python -m training.train`` process (DDP under
``python -m torch.distributed.run``) profiling steps 3 to 5 of 8, with no
logging window inside them (``--log-every 100``) so that the steps are plain
training steps. Traces are read back from their gzip files as JSON, the way
Perfetto would; breakdown.json is checked for its contract keys and for the
claims it makes: the loop's four phases cover the step (``other`` is at most
15% of it), single-device runs communicate nothing, DDP's all-reduce shows
in ``comm_total`` and partly in ``comm_exposed``, FSDP's all-gathers (forward,
backward) and reduce-scatters split all of its communication, and a DataParallel run that
fell back to one device says so. A run stopped inside its window stops
as promptly as any and writes no profile.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.train_ddp import torchrun
from training import comm_split
from training.breakdown import KEYS, PHASES

# serial: the profiled runs time their phases (the four ranges must cover the step, a stop inside
# the window is prompt), which another test beside them would stretch
pytestmark = [pytest.mark.proc, pytest.mark.serial]

REPO = Path(__file__).resolve().parent.parent
ARGS = [
    "--max-steps",
    "8",
    "--image-size",
    "16",
    "--batch-size",
    "32",
    "--log-every",
    "100",
    "--profile-steps",
    "3:6",
]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def start(cmd: list[str], timeout: float = 180) -> subprocess.CompletedProcess:
    # Own session, so a hung run can be ended with its workers (killing torchrun alone orphans
    # them).
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The four runs, one after the other (two cores here), each checked to have finished."""
    root = tmp_path_factory.mktemp("profiled")
    cmds = {
        "single": [
            sys.executable,
            "-m",
            "training.train",
            "--log-dir",
            str(root / "single"),
            *ARGS,
        ],
        "dp": [
            sys.executable,
            "-m",
            "training.train",
            "--mode",
            "dp",
            "--log-dir",
            str(root / "dp"),
            *ARGS,
        ],
        "ddp": torchrun("ddp", root / "ddp", *ARGS),
        "fsdp": torchrun("fsdp", root / "fsdp", *ARGS),
    }
    for name, cmd in cmds.items():
        res = start(cmd)
        assert res.returncode == 0, (name, res.stdout + res.stderr)
    return {name: root / name for name in cmds}


def breakdown(run: Path) -> dict:
    return json.loads((run / "profile" / "breakdown.json").read_text())


def trace(run: Path, rank: int) -> dict:
    with gzip.open(run / "profile" / f"trace_rank{rank}.json.gz", "rt") as f:
        return json.load(f)


def check_adds_up(step_ms: float, phases: dict[str, float]) -> None:
    named = sum(phases[p] for p in PHASES)
    assert step_ms > 0 and named > 0
    assert abs(named + phases["other"] - step_ms) <= 1e-3 * step_ms + 1e-3, (step_ms, phases)
    assert phases["other"] <= 0.15 * step_ms, (step_ms, phases)  # the four ranges cover the step


@pytest.mark.parametrize("mode,ranks", [("single", 1), ("dp", 1), ("ddp", 2), ("fsdp", 2)])
def test_every_rank_writes_a_trace_of_the_window_only(runs, mode, ranks):
    run = runs[mode]
    assert sorted(p.name for p in (run / "profile").iterdir()) == [
        "breakdown.json",
        *(f"trace_rank{r}.json.gz" for r in range(ranks)),
    ]
    for rank in range(ranks):
        names = {e.get("name") for e in trace(run, rank)["traceEvents"]}
        assert {n for n in names if str(n).startswith("ProfilerStep#")} == {
            "ProfilerStep#3",
            "ProfilerStep#4",
            "ProfilerStep#5",
        }
        assert set(PHASES) <= names
    summary = json.loads((run / "summary.json").read_text())
    assert summary["profile"] == {"breakdown": "profile/breakdown.json"}
    assert summary["config"]["profile_steps"] == "3:6" and summary["steps"] == 8


@pytest.mark.parametrize("mode", ["single", "dp", "ddp", "fsdp"])
def test_breakdown_keys_and_the_phases_add_up(runs, mode):
    b = breakdown(runs[mode])
    assert b["steps"] == [3, 6] and set(b["phases_ms"]) == set(KEYS)
    assert all(v >= 0 for v in b["phases_ms"].values())
    check_adds_up(b["step_ms"], b["phases_ms"])
    for r in b["per_rank"]:
        assert set(r) == {"rank", "step_ms", "phases_ms", "comm_by_device_ms"}
        check_adds_up(r["step_ms"], r["phases_ms"])


def test_single_communicates_nothing(runs):
    b = breakdown(runs["single"])
    assert b["phases_ms"]["comm_total"] == b["phases_ms"]["comm_exposed"] == 0.0
    assert b["note"] is None and b["world_size"] == 1 and b["effective_mode"] == "single"


def test_ddp_all_reduce_shows_as_communication(runs):
    b = breakdown(runs["ddp"])
    assert [r["rank"] for r in b["per_rank"]] == [0, 1] and b["world_size"] == 2
    for r in b["per_rank"]:
        ph = r["phases_ms"]
        # tinycnn fits one bucket, reduced after the last gradient: backward must wait for some of
        # it
        assert 0 < ph["comm_exposed"] <= ph["comm_total"] + 1e-6, ph
        assert ph["comm_exposed"] <= ph["backward"] + 1e-6, ph  # the wait is inside backward
        assert ph["dp_scatter"] == ph["dp_replicate"] == ph["dp_gather"] == 0.0
    assert {e.get("name") for e in trace(runs["ddp"], 1)["traceEvents"]} >= {"gloo:all_reduce"}


def test_fsdp_splits_its_communication_into_all_gathers_and_reduce_scatters(runs):
    """tinycnn's two units are all-gathered in forward and again in backward (resharded after
    forward) and reduce-scattered once a step; on gloo FSDP2 waits for each, and nothing else
    communicates in these steps, so the split's exposed parts are all of comm_total."""
    b = breakdown(runs["fsdp"])
    assert b["effective_mode"] == "fsdp" and b["world_size"] == 2
    for r in [b, *b["per_rank"]]:
        ph = r["phases_ms"]
        split = {k: ph[k] for k in comm_split.KEYS}
        assert all(ph[f"{k}_exposed"] > 0 for k in comm_split.SPLIT), ph
        assert sum(split.values()) == pytest.approx(ph["comm_total"], abs=2e-3), ph
        assert ph["comm_all_gather_fwd_exposed"] <= ph["forward"] + 1e-3, ph
    ops = {(c["op"], c["calls"], c["bytes"]) for c in b["collectives"]}
    assert ops == {("all_gather", 4.0, 48_720), ("reduce_scatter", 2.0, 24_360)}, b
    names = {e.get("name") for e in trace(runs["fsdp"], 0)["traceEvents"]}
    # gloo has no reduce-scatter of its own here: the c10d op runs as an all-reduce
    assert {"c10d::_reduce_scatter_base_", "gloo:all_reduce", "gloo:all_gather"} <= names


def test_dp_fallback_has_no_dp_phases_and_says_why(runs):
    b = breakdown(runs["dp"])
    assert (
        b["phases_ms"]["dp_scatter"]
        == b["phases_ms"]["dp_replicate"]
        == b["phases_ms"]["dp_gather"]
        == 0.0
    )
    assert b["note"].startswith("DataParallel fell back to one device") and "0 visible" in b["note"]
    assert b["phases_ms"]["comm_total"] == 0.0


def test_a_stop_inside_the_window_is_prompt_and_writes_no_profile(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "training.train",
            "--log-dir",
            str(run),
            "--epochs",
            "1000",
            "--log-every",
            "1",
            "--image-size",
            "16",
            "--batch-size",
            "32",
            "--profile-steps",
            "2:40000",
        ],
        cwd=REPO,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while (
            not (run / "progress.json").exists()
            or json.loads((run / "progress.json").read_text())["step"] < 3
        ):
            assert proc.poll() is None and time.monotonic() < deadline, (
                "the run never reached the window"
            )
            time.sleep(0.1)
        t = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        took = time.monotonic() - t
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read()
    assert proc.returncode == 143 and "Traceback" not in stderr, stderr
    assert took < 10, took
    assert "stopped inside --profile-steps 2:40000: no profile written" in stderr
    assert not (run / "profile").exists()
    assert "profile" not in json.loads((run / "summary.json").read_text())


def test_ddp_collectives_move_the_gradients_each_step(runs):
    """breakdown.json's ``collectives``: DDP's all-reduces per step carry the model's gradient
    bytes (tinycnn fits one bucket; the trainer's own reductions of a few floats ride along)."""
    from training import data, models

    b = breakdown(runs["ddp"])
    config = json.loads((runs["ddp"] / "summary.json").read_text())["config"]
    bundle = data.load(config["dataset"], 16)
    model = models.build(config["model"], bundle.channels, bundle.num_classes)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    reduces = [c for c in b["collectives"] if c["op"] == "all_reduce"]
    assert sorted(c["rank"] for c in reduces) == [0, 1], b["collectives"]
    for c in reduces:
        assert set(c) == {"op", "rank", "calls", "bytes", "total_ms", "algbw_gbps", "busbw_gbps"}
        assert c["calls"] >= 1 and c["total_ms"] > 0 and c["busbw_gbps"] > 0, c
        assert grad_bytes <= c["bytes"] <= grad_bytes + 4096, (c, grad_bytes)
        assert abs(c["busbw_gbps"] - c["algbw_gbps"]) < 1e-3 + 1e-3 * c["algbw_gbps"]  # n=2: ×1
    assert breakdown(runs["single"])["collectives"] == []
