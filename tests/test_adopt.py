"""A watcher that comes back (lab/engine/supervise/adopt.py), with real processes: a real 2-rank
DDP run (torchrun, gloo) whose supervisor gets SIGKILL, as the OOM killer sends it. The next
``python -m lab`` command starts a watcher that adopts it: within 15 s ``status --json`` says
``running`` with ``watcher: {"pid", "adopted_at"}``, device samples continue in ``sys/``, and
the run ends ``succeeded`` with its summary (read from the trainer's records: a process
not our child cannot be waited for). Stopping an adopted run (torchrun and two ranks of a script
that sleeps: the tree is the subject) leaves no process; a run whose
processes died with the supervisor stays ``lost``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lab.engine import procs
from lab.engine.launch import launcher
from lab.engine.spec.run import script_run
from lab.runfolder import read_json
from tests.helpers.engine_runs import alive_of, cfg, sleeper, wait_for, wait_ranks

pytestmark = [pytest.mark.proc, pytest.mark.slow]
REPO = Path(__file__).resolve().parent.parent


def _status(run_id: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "lab", "status", run_id, "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _sys_bytes(run_dir: Path) -> int:
    return sum(f.stat().st_size for f in (run_dir / "sys").rglob("*") if f.is_file())


def _kill_supervisor(run_dir: Path) -> dict:
    st = read_json(run_dir / "status.json")
    os.kill(st["supervisor_pid"], signal.SIGKILL)
    wait_for(lambda: not procs.alive(st["supervisor_pid"], st["supervisor_ct"]), 5, "it to die")
    return st


def _adopted(run_id: str, old_pid: int) -> dict:
    # seen by a status call started within 15 s of the kill (each call is a fresh `python -m lab`)
    js = wait_for(
        lambda: (lambda s: s if s["watcher"] and s["state"] == "running" else None)(
            _status(run_id)
        ),
        15,
        "the run to be adopted",
    )
    assert js["watcher"]["pid"] != old_pid and js["watcher"]["adopted_at"]
    return js


def test_killed_supervisor_of_a_ddp_run_is_adopted_and_the_run_succeeds(runs_dir):
    run_id = launcher.launch(
        cfg(mode="ddp", nproc=2, max_steps=300, epochs=1000, data_delay_ms=60), runs_dir
    )
    d = runs_dir / run_id
    wait_ranks(d, 2, 240)  # a loaded machine starts torchrun slowly
    st = _kill_supervisor(d)
    assert procs.alive(st["pid"], st["pid_ct"])  # the ranks train on
    js = _adopted(run_id, st["supervisor_pid"])
    before = _sys_bytes(d)
    wait_for(lambda: _sys_bytes(d) > before, 10, "device samples in sys/ after the adoption")
    # the adopted watcher writes the end state; read its file (a `lab status` process in this
    # loop would start one Python process every 0.1 s for the rest of the run), then ask the CLI
    wait_for(lambda: read_json(d / "status.json")["state"] != "running", 120, "the run to end")
    end = _status(run_id)
    assert end["state"] == "succeeded", end
    assert end["summary"] and end["summary"]["completed"]
    assert end["watcher"] == js["watcher"] and end["exit_code"] is None
    wait_for(lambda: alive_of(d) == [], 10, "no process of the run")


def test_stop_of_an_adopted_run_leaves_no_process(runs_dir):
    # torchrun and two ranks, of a script that sleeps: the process tree is the subject, not the
    # training (two trainer ranks trained flat out here until stopped)
    run_id = launcher.launch(script_run(sleeper(runs_dir), mode="ddp", nproc=2), runs_dir)
    d = runs_dir / run_id
    wait_ranks(d, 2, 240, trained=False)  # a loaded machine starts torchrun slowly
    st = _kill_supervisor(d)
    js = _adopted(run_id, st["supervisor_pid"])
    assert launcher.stop(run_id, runs_dir, grace_s=5) == "stopped"
    wait_for(lambda: alive_of(d) == [], 10, "no process of the run")
    assert not procs.alive(js["watcher"]["pid"])
    assert not procs.tree(st["pid"], st["pid_ct"])


def test_a_run_whose_processes_died_too_stays_lost(runs_dir):
    run_id = launcher.launch(script_run(sleeper(runs_dir), mode="ddp", nproc=2), runs_dir)
    d = runs_dir / run_id
    wait_ranks(d, 2, 240, trained=False)  # a loaded machine starts torchrun slowly
    st = _kill_supervisor(d)
    procs.end_tree(st.get("tree") or [], [st["pid"]], 2.0)
    wait_for(lambda: alive_of(d) == [], 10, "the ranks to end")
    js = _status(run_id)
    assert js["state"] == "lost" and js["watcher"] is None
