"""The health checks' rules (lab/engine/health/rules.py) and the pieces around them that need no
run.

The findings are pure functions of an ``Observation``: each is shown to
fire on what it names and to stay quiet just short of it. Also here: the
cutting of faulthandler's dump out of a log (lab/engine/health/stacks.py), the
SIGUSR1 check that keeps a process without a handler from being signalled,
the restarts read from torchrun's log lines and attempt folders
(lab/engine/health/restarts.py), and the trainer's restart rule for ``--resume``
(training/checkpoint.py). The real runs are tests/test_health_runs.py.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time

import pytest

from lab.engine.health import restarts, stacks
from lab.engine.health import rules as health
from lab.engine.health.rules import Observation
from training import checkpoint


def obs(**kw) -> Observation:
    base = dict(now=1000.0, started=900.0, alive=True, last_activity=990.0, step=40)
    base.update(kw)
    return Observation(**base)


def keys(o: Observation) -> list[str]:
    return [f.key for f in health.findings(o)]


def test_stall_threshold_is_the_option_or_the_larger_of_60_s_20_steps_and_3_gaps():
    assert health.stall_threshold(7.5, [100.0], [100.0]) == 7.5
    assert health.stall_threshold(0, [], []) == 60.0
    assert health.stall_threshold(0, [0.5, 4.0, 5.0], []) == 80.0  # 20 x the median step
    # a long logging window: 3 gaps
    assert health.stall_threshold(0, [0.1], [10.0, 30.0, 40.0]) == 90.0


def test_stalled_counts_from_the_last_step_or_from_the_launch():
    assert keys(obs(now=1049.0, last_activity=990.0)) == []  # 59 s < 60 s
    f = health.findings(obs(now=1051.0, last_activity=990.0))[0]
    assert f.key == "stalled" and f.evidence["idle_s"] == 61.0 and "after step 40" in f.message
    hang = health.findings(obs(now=1000.0, started=930.0, last_activity=None, step=0))
    assert [h.key for h in hang] == ["stalled"] and "before any step" in hang[0].message
    assert keys(obs(now=2000.0, alive=False)) == []  # ended processes are not stalled
    assert keys(obs(now=1004.0, stall_after=3.0, last_activity=1000.0)) == ["stalled"]


def test_a_compiling_run_gets_its_first_step_long_but_not_the_steps_after():
    first = dict(now=1500.0, started=900.0, last_activity=None, step=0)  # 600 s, no step yet
    assert keys(obs(**first)) == ["stalled"]
    assert keys(obs(**first, compiling=True)) == []  # inductor compiles inside step 1
    assert keys(obs(**(first | {"now": 900.0 + health.COMPILE_STALL_S + 1}), compiling=True)) == [
        "stalled"
    ]
    # once a step came, a compiling run is held to the usual limit, and an asked limit stands
    assert keys(obs(now=1051.0, last_activity=990.0, compiling=True)) == ["stalled"]
    assert keys(obs(**first, compiling=True, stall_after=30.0)) == ["stalled"]


def test_nan_loss_names_the_first_non_finite_point():
    f = health.findings(obs(loss=[(10, 2.3), (20, math.inf), (30, math.nan)]))
    assert [x.key for x in f] == ["nan_loss"] and f[0].evidence["first_step"] == 20
    assert "--stop-on-nan" in f[0].fix
    assert keys(obs(loss=[(10, 2.3), (20, 0.1)])) == []


def test_chance_accuracy_only_after_two_epochs_and_within_two_points():
    near = dict(acc=[(40, 0.115)], num_classes=10, steps_per_epoch=20)
    assert keys(obs(**near, step=40)) == ["chance_accuracy"]
    assert keys(obs(**near, step=39)) == []  # not yet two epochs
    # 3 points away
    assert keys(obs(acc=[(40, 0.13)], num_classes=10, steps_per_epoch=20, step=40)) == []
    f = health.findings(obs(**near, step=40))[0]
    assert "set_epoch" in f.fix and "learning rate" in f.fix and "labels" in f.fix


def test_input_bound_over_30_percent_of_the_step_shows_workers_and_pin_memory():
    f = health.findings(obs(data_ms=20.0, step_ms=50.0, workers=0, pin_memory=True))
    assert [x.key for x in f] == ["input_bound"] and f[0].evidence["share"] == 0.4
    assert "--workers (now 0)" in f[0].fix and "pin_memory is on" in f[0].fix
    assert keys(obs(data_ms=14.0, step_ms=50.0)) == []


def test_grad_spike_from_the_trainers_warnings():
    f = health.findings(obs(grad_warnings=[(5, 12.0), (9, 40.0)], grad_limit=10.0))
    assert [x.key for x in f] == ["grad_spike"]
    assert f[0].evidence == {"count": 2, "first_step": 5, "max_norm": 40.0, "limit": 10.0}


def test_a_finding_keeps_its_since_step_and_added_evidence_and_round_trips_through_status():
    first = health.findings(obs(now=1100.0, last_activity=990.0))
    stacked = [
        health.Finding(
            f.key, f.message, f.fix, "2026-01-01T00:00:00+00:00", dict(f.evidence, stacks=["s"]), 7
        )
        for f in first
    ]
    again = health.findings(obs(now=1200.0, last_activity=990.0, step=41), stacked)
    assert again[0].since == "2026-01-01T00:00:00+00:00" and again[0].step == 7
    assert again[0].evidence["stacks"] == ["s"] and again[0].evidence["idle_s"] == 210.0
    back = health.from_dicts([f.to_dict() for f in again])
    assert back == again
    assert set(again[0].to_dict()) == {"key", "message", "fix", "since", "evidence"}


LOG = """[rank 0] INFO step 10
Thread 0x00007f5d612596c0 (most recent call first):
  File "/x/threading.py", line 331 in wait
2026 INFO some other thread's log line

Current thread 0x00007f5e32272b80 (most recent call first):
  File "/x/loop.py", line 172 in _train_step
  File "<frozen runpy>", line 198 in _run_module_as_main
"""


def test_the_dump_is_cut_out_of_the_log_without_the_other_lines():
    cut = stacks.cut_faulthandler(LOG)
    assert "INFO" not in cut
    assert cut.splitlines() == [
        "Thread 0x00007f5d612596c0 (most recent call first):",
        '  File "/x/threading.py", line 331 in wait',
        "",
        "Current thread 0x00007f5e32272b80 (most recent call first):",
        '  File "/x/loop.py", line 172 in _train_step',
        '  File "<frozen runpy>", line 198 in _run_module_as_main',
    ]


@pytest.mark.proc
def test_only_a_process_with_a_sigusr1_handler_is_signalled():
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    handled = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import faulthandler, signal, time; "
            "faulthandler.register(signal.SIGUSR1); print('up', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert handled.stdout.readline().strip() == b"up"
        time.sleep(0.2)
        assert not stacks.catches(plain.pid, signal.SIGUSR1)  # the default action would kill it
        assert stacks.catches(handled.pid, signal.SIGUSR1)
        assert not stacks.catches(2**22 + 7, signal.SIGUSR1)  # no such process
    finally:
        for p in (plain, handled):
            p.kill()
            p.wait()


def test_py_spy_missing_or_refused_is_said_exactly(monkeypatch, tmp_path):
    monkeypatch.setenv(stacks.PY_SPY_ENV, str(tmp_path / "nope"))
    text, why = stacks._spy(os.getpid())
    assert text is None and "py-spy is not installed" in why
    monkeypatch.setattr(stacks, "PTRACE_SCOPE", tmp_path / "scope")
    (tmp_path / "scope").write_text("1\n")
    assert (
        "kernel.yama.ptrace_scope is 1" in stacks.ptrace_note() and "sysctl" in stacks.ptrace_note()
    )


def test_restarts_pair_attempt_folders_with_torchruns_failure_lines(tmp_path):
    for a in (0, 1, 2, 3):
        (tmp_path / "logs" / "job_1" / f"attempt_{a}" / "0").mkdir(parents=True)
    # a rank's traceback under torchrun: each line prefixed with its rank
    (tmp_path / "logs/job_1/attempt_1/0/stderr.log").write_text(
        "[rank0]: Traceback ...\n[rank0]: ValueError: bad batch\n"
    )
    # rank 0 failed only because its peer died (a CI run: rank 1 SIGKILLed, torchrun named rank 0)
    gloo = (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error "
        "[127.0.0.1]:62181: Connection reset by peer"
    )
    (tmp_path / "logs/job_1/attempt_2/0/stderr.log").write_text(
        f"[rank0]: Traceback ...\n[rank0]: {gloo}\n"
    )
    (tmp_path / "stdout.log").write_text(
        "E1129 api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 27127) of binary: "
        "/bin/python\n"
        "E1129 api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 27200) of binary: "
        "/bin/python\n"
        "E1129 api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 27300) of binary: "
        "/bin/python\n"
    )
    got = restarts.restarts(tmp_path)
    assert got == [
        {"attempt": 1, "rank": 1, "exit_code": -9, "cause": "local rank 1 was killed by SIGKILL"},
        {
            "attempt": 2,
            "rank": 0,
            "exit_code": 1,
            "cause": "local rank 0 exited with code 1: ValueError: bad batch",
        },
        {
            "attempt": 3,
            "rank": 0,
            "exit_code": 1,
            "cause": f"local rank 0 exited with code 1: {gloo} ({restarts.LOST_PEER})",
        },
    ]
    assert restarts.restarts(tmp_path / "none") == []


def test_a_restarted_attempt_resumes_from_its_own_checkpoint(tmp_path):
    given = tmp_path / "old.pt"
    given.write_bytes(b"x")
    assert checkpoint.resolve(str(given), tmp_path) == given
    assert checkpoint.resolve("auto", tmp_path) is None
    own = tmp_path / "checkpoints" / checkpoint.LAST
    own.parent.mkdir()
    own.write_bytes(b"y")
    # a first attempt starts where it was told
    assert checkpoint.resolve(str(given), tmp_path) == given
    # a restart goes on from its own
    assert checkpoint.resolve(str(given), tmp_path, restarted=True) == own
    assert checkpoint.resolve(None, tmp_path, restarted=True) is None
    with pytest.raises(checkpoint.BadInput):
        checkpoint.resolve(str(tmp_path / "missing.pt"), tmp_path)


def test_a_job_with_no_process_here_says_why_it_has_no_stacks(tmp_path):
    from lab.engine.health.watch import NO_LOCAL_PROCESS, HealthWatch

    watch = HealthWatch(tmp_path, {"config": {}}, lambda **kw: None)
    d = watch.dump(0, [])
    assert d.files == [] and d.notes == [NO_LOCAL_PROCESS] and "other nodes" in d.notes[0]


def test_a_stalled_spells_stacks_are_taken_1_2_4_and_8_thresholds_apart(tmp_path, monkeypatch):
    """Before its first step a run is idle from its launch: ranks that start slowly on a busy
    machine and then hang were still starting at dumps one threshold apart (4 thresholds in all,
    caught in CI once); the waits double, so the 5 dumps reach 15 thresholds past the first."""
    from lab.engine.health import watch as watching
    from lab.engine.health.rules import Finding

    assert [watching.dump_wait_s(4.0, n) for n in (1, 2, 3, 4)] == [4.0, 8.0, 16.0, 32.0]
    now = [100.0]
    monkeypatch.setattr(watching.time, "monotonic", lambda: now[0])
    stalled = Finding("stalled", "no new step", "fix", "then", {"threshold_s": 4.0})
    monkeypatch.setattr(health, "findings", lambda obs, before: [stalled])
    w = watching.HealthWatch(tmp_path, {"config": {}}, lambda **kw: None)
    monkeypatch.setattr(
        w, "observe", lambda alive, dirs: Observation(now=0.0, started=0.0, alive=True)
    )
    taken: list[float] = []
    monkeypatch.setattr(w, "dump", lambda pid, tree: taken.append(now[0]) or stacks.Dump(at="t"))
    while now[0] < 200:  # a supervisor's sample every second, stalled throughout
        w.tick(1, [1], {}, [])
        now[0] += 1.0
    assert [t - 100 for t in taken] == [0, 4, 12, 28, 60]
    assert len(taken) == watching.MAX_STALL_DUMPS
