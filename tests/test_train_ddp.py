"""DDP on CPU for real: two ranks under torchrun with gloo, checked against a single-device run.

One module-scoped torchrun run (2 processes, ``OMP_NUM_THREADS=1``, a free
master port found by binding port 0) and one single-device run with the same
seed and global batch, both logging every step. The DDP run must finish,
leave exactly one event file (rank 0's), report both ranks' memory, and
reproduce the single run's per-step loss to 1e-4 relative: that is what "the
global batch means the same thing in every mode" has to deliver. A second
torchrun run is stopped by a SIGTERM to rank 1 alone: both ranks must leave
after the same step and rank 0 write the summary. Every run is pinned to the
CPU (``CUDA_VISIBLE_DEVICES=""``), so gloo is expected on a GPU box too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.helpers.train_ddp import SAME, losses, torchrun

pytestmark = pytest.mark.proc

REPO = Path(__file__).resolve().parent.parent
# gloo on the CPU, even on a GPU box
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    run = tmp_path_factory.mktemp("ddp") / "run"
    cmd = torchrun("ddp", run, *SAME)
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
        out, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return run, subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def test_ddp_two_ranks_finish_and_only_rank0_writes(ddp_run):
    run, res = ddp_run
    assert res.returncode == 0, res.stdout + res.stderr
    assert len(list((run / "tb").iterdir())) == 1, list((run / "tb").iterdir())
    assert {p.name for p in run.iterdir()} == {"tb", "progress.json", "summary.json", "checkpoints"}
    summary = json.loads((run / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["backend"] == "gloo"
    assert summary["devices"] == ["cpu0", "cpu1"] and summary["per_device_batch"] == 32
    assert set(summary["peak_mem_mib"]) == {"cpu0", "cpu1"}


def test_ddp_memory_tags_of_both_ranks(ddp_run):
    run, _ = ddp_run
    acc = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for dev in ("cpu0", "cpu1"):
        assert {
            f"mem/{dev}/allocated_mib",
            f"mem/{dev}/peak_mib",
            f"mem/{dev}/reserved_mib",
        } <= tags


def test_ddp_logs_carry_the_rank(ddp_run):
    _, res = ddp_run
    assert "[rank 0] INFO step 10/10 loss" in res.stderr
    # progress is rank 0's
    assert "[rank 1] INFO" in res.stderr and "[rank 1] INFO step" not in res.stderr


def test_ddp_reproduces_single_losses(ddp_run, single_same):
    single, ddp = losses(single_same), losses(ddp_run[0])
    assert sorted(single) == sorted(ddp) == list(range(1, 11))
    for step in range(1, 11):
        assert abs(ddp[step] - single[step]) <= 1e-4 * abs(single[step]), (
            step,
            single[step],
            ddp[step],
        )
    assert single[1] != single[10]  # the losses move, so agreeing is not trivial


def test_a_stop_reaching_one_rank_stops_both_at_the_same_step(tmp_path):
    """SIGTERM to rank 1 alone: the ranks agree on the stop, leave after the same step, rank 0
    writes the summary.

    Without the agreement rank 0 would train on into a collective rank 1 has left (under NCCL: a
    hang until the watchdog fires, then SIGKILL before summary.json is written)."""
    import re
    import time

    import psutil

    run = tmp_path / "run"
    cmd = torchrun(
        "ddp", run, "--epochs", "1000", "--log-every", "1", "--image-size", "8",
        "--batch-size", "32", "--checkpoint", "none",
    )  # fmt: skip
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
        deadline = time.monotonic() + 120
        while not (run / "progress.json").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the run never started"
            time.sleep(0.1)
        rank1 = [
            p
            for p in psutil.Process(proc.pid).children(recursive=True)
            if p.environ().get("RANK") == "1"
        ]
        assert len(rank1) == 1
        rank1[0].terminate()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    stopped = dict(re.findall(r"\[rank (\d)\] WARNING SIGTERM: stopped after step (\d+)", err))
    assert set(stopped) == {"0", "1"} and stopped["0"] == stopped["1"], err[-3000:]
    assert int(stopped["0"]) % 5 == 0  # where the ranks agree (training.loop.STOP_SYNC_EVERY)
    # then torchrun's own report of the 143s, traceback and all
    ranks_part = err.split(" failed (exitcode")[0]
    assert "another rank was asked to stop" in ranks_part and "Traceback" not in ranks_part, (
        ranks_part[-3000:]
    )
    summary = json.loads((run / "summary.json").read_text())
    assert summary["completed"] is False and summary["steps"] == int(stopped["0"])
    assert summary["devices"] == ["cpu0", "cpu1"]
