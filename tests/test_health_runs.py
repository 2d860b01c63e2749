"""When a run goes wrong, for real: stalled ranks and their stacks, NaN, slow input, restarts,
resume.

Every test starts real processes on this machine (the trainer on the CPU,
torchrun with gloo; a user's DDP script) through lab/engine/launch/launcher.py and
its supervisor, whose health watch (lab/engine/health/watch.py,
lab/engine/health/stacks.py, lab/engine/health/restarts.py) is what is tested, with
training/debug.py on the trainer's side. The hang is made with the
trainer's test seam ``LAB_TEST_HANG_RANK`` (rank 1 blocks before its first
training step, so before its first all-reduce) and, for a script, by a rank
that never calls its all-reduce. The script's stacks need ``py-spy``
(requirements.txt; ``LAB_PY_SPY`` may name the binary): the test is skipped,
saying so, where it is not installed. Thresholds are a few seconds so the
file stays short (about two minutes on two busy cores).
"""

from __future__ import annotations

import json
import os
import re
import signal
import textwrap
import time
from pathlib import Path

import pytest

from lab import cli
from lab.engine import procs, registry
from lab.engine.health import stacks
from lab.engine.launch import launcher
from lab.engine.spec.run import RunConfig, script_run
from lab.events import LogdirReader
from lab.runfolder import LAST_CHECKPOINT, read_json
from tests.helpers.engine_runs import alive_of, state, wait_for

pytestmark = [pytest.mark.proc, pytest.mark.slow]
FINAL = ("succeeded", "failed", "stopped", "lost")
ENV = {"OMP_NUM_THREADS": "1"}


def cfg(**kw) -> RunConfig:
    base = dict(image_size=8, batch_size=64, log_every=2, checkpoint="none", extra_env=dict(ENV))
    base.update(kw)
    return RunConfig(**base)


def health_of(run_id: str, root: Path) -> dict[str, dict]:
    return {f["key"]: f for f in registry.get_run(run_id, root).health}


def final(run_id: str, root: Path, timeout_s: float = 120) -> registry.RunRecord:
    wait_for(lambda: state(run_id, root) in FINAL, timeout_s, f"run {run_id} to end")
    return registry.get_run(run_id, root)


@pytest.fixture
def ended(runs_dir):
    """Runs registered here are stopped at the end of the test, passed or failed: a hung run never
    lingers."""
    started: list[str] = []
    yield started
    for run_id in started:
        if state(run_id, runs_dir) not in FINAL:
            launcher.stop(run_id, runs_dir, grace_s=1)


def stack_text(run_dir: Path, files: list[str], who: str) -> str:
    mine = [f for f in files if f.startswith(f"stacks/{who}-")]
    return (run_dir / mine[0]).read_text() if mine else ""


def test_a_ddp_rank_blocked_before_its_first_all_reduce_is_stalled_with_every_stack(
    runs_dir, capsys, ended
):
    run_id = launcher.launch(
        cfg(
            mode="ddp",
            nproc=2,
            max_steps=50,
            stall_after=6.0,
            extra_env=dict(ENV, LAB_TEST_HANG_RANK="1"),
        ),
        runs_dir,
    )
    ended.append(run_id)
    d = runs_dir / run_id

    # the first dumps may come while the ranks still start (they count as idle from the launch):
    # wait for the hang itself; the dumps 6, 12, 24 and 48 s apart reach 96 s past the first
    def caught() -> dict | None:
        f = health_of(run_id, runs_dir).get("stalled")
        files = (f or {}).get("evidence", {}).get("stacks") or []
        both = "block_forever_for_tests" in stack_text(
            d, files, "rank1"
        ) and "backward" in stack_text(d, files, "rank0")
        return f if both else None

    found = wait_for(
        caught, 150, "a stalled finding with rank 1's blocking call and rank 0's all-reduce"
    )
    ev = found["evidence"]
    assert state(run_id, runs_dir) == "running"  # alive, and stuck
    assert ev["threshold_s"] == 6.0 and ev["idle_s"] > 6.0 and ev["last_step"] == 0
    rank1, rank0 = stack_text(d, ev["stacks"], "rank1"), stack_text(d, ev["stacks"], "rank0")
    assert "faulthandler" in rank1.splitlines()[0] and "hang_if_asked" in rank1
    # rank 0 waits in the gradients' all-reduce for the rank that never came
    assert "backward" in rank0
    # the device strip at that moment (no GPU here)
    assert ev["devices"] and "cpu_pct" in ev["devices"][0]
    assert cli.main(["status", run_id]) == 0 and "[stalled]" in capsys.readouterr().out
    # a health/stalled event at the step it was found, in the run's health/ folder
    reader = LogdirReader(d / "health")
    reader.refresh()
    assert any("health/stalled" in reader.scalars(n) for n in reader.run_names())
    # "Dump stacks now", through the command line: a new pair of files
    assert cli.main(["stacks", run_id, "--wait", "60"]) == 0
    printed = capsys.readouterr().out.split()
    assert len([p for p in printed if re.search(r"/stacks/rank[01]-", p)]) == 2, printed
    t = time.monotonic()
    assert launcher.stop(run_id, runs_dir, grace_s=2) == "stopped"
    assert time.monotonic() - t < 20
    wait_for(lambda: alive_of(d) == [], 10, "no process of the stopped run")
    # kept at the end: it says why the run was stopped
    assert "stalled" in health_of(run_id, runs_dir)


SCRIPT = textwrap.dedent("""\
    import threading
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        threading.Event().wait()  # rank 1 never reaches the all-reduce
    t = torch.ones(1)
    dist.all_reduce(t)
    """)


@pytest.mark.skipif(
    stacks.py_spy() is None, reason="py-spy is not installed (pip install -r requirements.txt)"
)
def test_a_users_ddp_script_that_hangs_is_stalled_and_read_with_py_spy(runs_dir, tmp_path, ended):
    path = tmp_path / "hang.py"
    path.write_text(SCRIPT)
    run_id = launcher.launch(
        script_run(
            str(path),
            mode="ddp",
            nproc=2,
            stall_after=3.0,
            extra_env=dict(ENV),
        ),
        runs_dir,
    )
    ended.append(run_id)
    d = runs_dir / run_id

    def caught() -> dict | None:
        f = health_of(run_id, runs_dir).get("stalled")
        files = (f or {}).get("evidence", {}).get("stacks") or []
        return (
            f
            if "all_reduce" in stack_text(d, files, "rank0")
            and "hang.py" in stack_text(d, files, "rank1")
            else None
        )

    ev = wait_for(caught, 120, "both ranks' py-spy stacks of the hung script")["evidence"]
    assert "py-spy" in stack_text(d, ev["stacks"], "rank1").splitlines()[0]
    assert "wait" in stack_text(d, ev["stacks"], "rank1")
    assert launcher.stop(run_id, runs_dir, grace_s=2) == "stopped"
    wait_for(lambda: alive_of(d) == [], 10, "no process of the stopped script run")


def test_nan_loss_is_found_and_stop_on_nan_fails_the_run_with_it(runs_dir):
    diverge = dict(lr=1e6, max_steps=12, data_delay_ms=0.0)
    on = launcher.launch(cfg(stop_on_nan=True, **diverge), runs_dir)
    off = launcher.launch(cfg(**diverge), runs_dir)
    slow = launcher.launch(
        cfg(dataset="synthetic", workers=0, data_delay_ms=20.0, max_steps=16, log_every=4), runs_dir
    )
    rec = final(on, runs_dir)
    assert rec.state == "failed" and rec.exit_code == 3
    assert rec.diagnosis["key"] == "nan_loss" and "--stop-on-nan" in rec.diagnosis["cause"]
    assert "nan_loss" in health_of(on, runs_dir)
    # it ended at the first NaN window
    assert (read_json(runs_dir / on / "progress.json") or {})["step"] < 12
    rec = final(off, runs_dir)
    # trained on, but flagged
    assert rec.state == "succeeded" and "nan_loss" in health_of(off, runs_dir)
    # inf may come first
    assert health_of(off, runs_dir)["nan_loss"]["evidence"]["value"] in ("nan", "inf", "-inf")
    rec = final(slow, runs_dir)
    bound = health_of(slow, runs_dir).get("input_bound")
    assert rec.state == "succeeded" and bound, rec.health
    assert bound["evidence"]["share"] > 0.3 and bound["evidence"]["workers"] == 0
    assert "--workers (now 0)" in bound["fix"] and "pin_memory" in bound["fix"]


def test_a_rank_killed_once_restarts_resumes_and_succeeds(runs_dir, ended):
    run_id = launcher.launch(
        cfg(
            mode="ddp",
            nproc=2,
            epochs=3,
            checkpoint="last",
            log_every=5,
            data_delay_ms=40.0,
            max_restarts=1,
        ),
        runs_dir,
    )
    ended.append(run_id)
    d = runs_dir / run_id
    wait_for(lambda: (d / LAST_CHECKPOINT).is_file(), 120, "the first checkpoint")
    st = read_json(d / "status.json") or {}
    ranks = procs.rank_pids(procs.tree(st.get("pid"), st.get("pid_ct")))
    assert set(ranks) == {0, 1}, ranks
    os.kill(ranks[1], signal.SIGKILL)
    rec = final(run_id, runs_dir, 180)
    assert rec.state == "succeeded", rec.diagnosis
    assert len(rec.restarts) == 1, rec.restarts
    r = rec.restarts[0]
    # torchrun logs one failure per attempt, the earliest by a timestamp in whole seconds, so it can
    # name rank 0 when rank 0 ended within the same second as our SIGKILL of rank 1: SIGTERMed by
    # torchrun's teardown (-15, seen once in CI), or failed on its own when gloo found its peer
    # gone (1, seen once in CI; 4 of 4 alone named rank 1). Each is what torchrun said.
    assert r["attempt"] == 1, r
    causes = {
        (1, -9): "local rank 1 was killed by SIGKILL",
        (0, -15): "local rank 0 was killed by SIGTERM",
        (0, 1): "local rank 0 exited with code 1: RuntimeError: ",  # gloo's, read from its log
    }
    assert (r["rank"], r["exit_code"]) in causes, r
    assert r["cause"].startswith(causes[r["rank"], r["exit_code"]]), r
    second = "\n".join(p.read_text() for p in d.glob("logs/*/attempt_1/0/stderr.log"))
    assert re.search(r"resumed from .*last\.pt at step \d+", second), second[-2000:]
    assert (read_json(d / "summary.json") or {})["steps"] == 3 * (
        read_json(d / "progress.json") or {}
    )["steps_per_epoch"]


def _first_logged_step(run_dir: Path) -> int:
    reader = LogdirReader(run_dir / "tb")
    reader.refresh()
    return int(min(min(reader.scalars(n)["train/loss"].step) for n in reader.run_names()))


def test_resume_of_a_stopped_run_continues_its_curve(runs_dir, capsys, ended):
    old = launcher.launch(
        cfg(epochs=3, checkpoint="last", log_every=5, data_delay_ms=40.0), runs_dir
    )
    ended.append(old)
    d_old = runs_dir / old
    wait_for(lambda: (d_old / LAST_CHECKPOINT).is_file(), 120, "the first checkpoint")
    assert launcher.stop(old, runs_dir, grace_s=5) == "stopped"
    assert cli.main(["resume", old, "--json"]) == 0
    new = json.loads(capsys.readouterr().out)["run_id"]
    ended.append(new)
    rec = final(new, runs_dir)
    assert rec.state == "succeeded" and rec.resumed_from == old
    assert registry.get_run(old, runs_dir).resumed_by == [new]
    # its own supervisor wrote it
    assert read_json(runs_dir / new / "status.json")["resumed_from"] == old
    at = int(
        re.search(
            r"resumed from .*last\.pt at step (\d+)", (runs_dir / new / "stdout.log").read_text()
        ).group(1)
    )
    assert (
        at > 0 and at % (read_json(runs_dir / new / "progress.json") or {})["steps_per_epoch"] == 0
    )
    first = _first_logged_step(runs_dir / new)
    assert at < first <= at + 5  # the next logging window after the checkpoint's step
    assert cli.main(["resume", new]) == 2  # a succeeded run is not resumed
    assert "only a failed, stopped or lost run" in capsys.readouterr().err
