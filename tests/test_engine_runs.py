"""Real runs end to end (lab/engine/launch/launcher.py, supervisor.py): launch, supervise, stop,
kill, lose, sweep, two nodes.

Everything here starts real processes on this machine (the trainer on the
CPU, torchrun with gloo). Runs are kept tiny (a few steps of 8x8 images,
OMP_NUM_THREADS=1) so the file runs in about two minutes on two busy cores.
"""

from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from lab.engine import logs, ports, procs, registry
from lab.engine.launch import launcher, sweeps
from lab.engine.spec.run import ConfigError, script_run
from lab.runfolder import now_iso, read_json, write_json_atomic
from tests.helpers.engine_runs import alive_of, cfg, sleeper, state, wait_for, wait_ranks

pytestmark = pytest.mark.slow
FINAL = ("succeeded", "failed", "stopped", "lost")


def cheap_run(root: Path, code: str, args: tuple[str, ...] = ()) -> str:
    """A run folder whose command is a tiny Python child instead of the trainer (fast stop
    tests)."""
    run_id = f"cheap-{os.urandom(3).hex()}"
    d = root / run_id
    d.mkdir()
    write_json_atomic(
        d / "run.json",
        {
            "run_id": run_id,
            "name": "",
            "config": {"mode": "single", "gpus": []},
            "argv": [sys.executable, "-c", code, *args],
            "env": {},
            "sweep_id": None,
            "created_at": now_iso(),
        },
    )
    # run.json alone: queued until the supervisor writes status.json
    assert state(run_id, root) == "queued"
    launcher.start_supervisor(d)
    assert read_json(d / "status.json")["supervisor_pid"]
    return run_id


# a parent that spawns a grandchild in its own session which ignores SIGTERM: the worst straggler
STUBBORN = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, "
    "signal.SIG_IGN); "
    'print("up", flush=True); time.sleep(600)\'], start_new_session=True)\n'
    "time.sleep(600)\n"
)


@pytest.mark.serial
@pytest.mark.proc
def test_three_modes_launch_at_once_and_succeed(runs_dir):
    ids = []
    for c in (cfg(mode="single"), cfg(mode="dp"), cfg(mode="ddp", nproc=2)):
        t = time.monotonic()
        ids.append(launcher.launch(c, runs_dir))
        assert time.monotonic() - t < 5, (
            "launch must return once the supervisor is up, not after the run"
        )
        assert state(ids[-1], runs_dir) in ("starting", "running")
    for rid in ids:
        assert launcher.wait(rid, runs_dir, 120) == "succeeded", registry.get_run(rid, runs_dir)
        d = runs_dir / rid
        assert glob.glob(str(d / "tb" / "events.out.tfevents.*")), "trainer events"
        assert glob.glob(str(d / "sys" / "events.out.tfevents.*")), "supervisor events"
        rec = registry.get_run(rid, runs_dir)
        assert rec.summary and rec.summary["steps"] == 3 and rec.exit_code == 0
        wait_for(
            lambda d=d: alive_of(d) == [], 5, "the supervisor to exit after its last status write"
        )
    ddp = runs_dir / ids[2]
    assert (ddp / "logs").is_dir() and read_json(ddp / "status.json")["port"] != 29500


@pytest.mark.proc
def test_four_ddp_runs_at_once_do_not_clash(runs_dir):
    """Four torchrun jobs of two ranks at once, each on its own port: torchrun's agent binds it
    (its rendezvous store, the clash that the retry test below imitates), so the ranks are a
    script's that sleeps 1 s, not the trainer's (12 processes importing torch were 4 here; the
    trainer's DDP runs succeed in the tests above)."""
    nap = script_run(sleeper(runs_dir, 1), mode="ddp", nproc=2)
    ids = [launcher.launch(nap, runs_dir) for _ in range(4)]
    states = [launcher.wait(r, runs_dir, 240) for r in ids]
    assert states == ["succeeded"] * 4, [registry.get_run(r, runs_dir).diagnosis for r in ids]
    ports = {read_json(runs_dir / r / "status.json")["port"] for r in ids}
    assert len(ports) == 4


@pytest.mark.serial
@pytest.mark.proc
def test_stop_and_kill9_of_real_ddp_runs(runs_dir):
    """Two real 2-rank DDP runs side by side: one is stopped, one loses rank 1 to kill -9."""
    to_stop = launcher.launch(cfg(mode="ddp", nproc=2, max_steps=0, epochs=1000), runs_dir)
    to_kill = launcher.launch(cfg(mode="ddp", nproc=2, max_steps=0, epochs=1000), runs_dir)
    d_stop, d_kill = runs_dir / to_stop, runs_dir / to_kill
    wait_ranks(d_stop, 2)
    ranks = wait_ranks(d_kill, 2)

    os.kill(ranks[1], signal.SIGKILL)
    t_kill = time.monotonic()
    t = time.monotonic()
    assert launcher.stop(to_stop, runs_dir, grace_s=5) == "stopped"
    assert time.monotonic() - t < 10
    assert state(to_stop, runs_dir) == "stopped"
    wait_for(lambda: alive_of(d_stop) == [], 3, "no process of the stopped run")
    assert launcher.stop(to_stop, runs_dir) == "stopped"  # a second stop is a no-op
    # both ranks left after the same step (they agree on a stop), and rank 0 wrote the summary first
    left = [
        re.findall(r"SIGTERM: stopped after step (\d+)", logs.tail(d_stop, 400, rank))
        for rank in (0, 1)
    ]
    assert left[0] and left[0] == left[1], left
    summary = read_json(d_stop / "summary.json")
    assert summary["completed"] is False and summary["steps"] == int(left[0][0])

    # Within torchrun's own grace: a surviving rank usually fails at once on its lost peer, but
    # in one CI run rank 0 stayed in training past torchrun's SIGTERM until its SIGKILL 30 s later
    # ("Unable to shutdown process via 15, forcefully exiting via 9"), and the run ended failed,
    # diagnosed as here
    wait_for(
        lambda: state(to_kill, runs_dir) in FINAL,
        45 - (time.monotonic() - t_kill),
        "the killed run to fail",
    )
    rec = registry.get_run(to_kill, runs_dir)
    assert rec.state == "failed"
    assert rec.diagnosis["key"] == "killed" and rec.diagnosis["exit_code"] == -9
    # under load torchrun may name rank 0 (it lost its peer and exited first) as the first observed
    # failure: the diagnosis still names the rank that was killed
    assert rec.diagnosis["rank"] == 1 and rec.diagnosis["cause"].startswith("Rank 1 "), rec
    wait_for(lambda: alive_of(d_kill) == [], 5, "no process of the failed run")


@pytest.mark.serial
@pytest.mark.proc
def test_stop_twenty_times_without_a_leak(runs_dir):
    leaks = []
    for i in range(20):
        rid = cheap_run(runs_dir, STUBBORN)
        d = runs_dir / rid
        wait_for(
            lambda d=d: (
                (d / "stdout.log").exists() and (d / "stdout.log").read_text().startswith("up")
            ),
            10,
            "the grandchild",
        )
        assert launcher.stop(rid, runs_dir, grace_s=0.3) == "stopped"
        tree = read_json(d / "status.json")["tree"]
        assert len(tree) == 2  # the child and its SIGTERM-ignoring grandchild were both found
        end = time.monotonic() + 3  # the supervisor exits just after its last status write
        while alive_of(d) and time.monotonic() < end:
            time.sleep(0.05)
        left = alive_of(d) + [p for p, ct in tree if procs.alive(p, ct)]
        if left:
            leaks.append((i, left))
    assert leaks == []


@pytest.mark.proc
def test_a_taken_port_is_replaced_before_the_start(runs_dir):
    import socket

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken = held.getsockname()[1]
    try:  # the port recorded at launch has been taken since: the supervisor picks another
        rid = cheap_run(runs_dir, "import sys; print(sys.argv[-1])", ("--master-port", str(taken)))
        assert launcher.wait(rid, runs_dir, 20) == "succeeded"
        used = int((runs_dir / rid / "stdout.log").read_text().strip())
        assert used != taken and read_json(runs_dir / rid / "status.json")["port"] == used
    finally:
        held.close()


@pytest.mark.proc
def test_a_job_that_dies_of_address_in_use_is_retried_on_another_port(runs_dir):
    port = str(ports.free_port())
    # the child fails like torchrun's store on a taken port, but only on the first port it is given
    code = (
        f"import sys\nif sys.argv[-1] == {port!r}:\n"
        "    print('RuntimeError: The server socket has failed to listen on any local network "
        "address. '\n"
        "          'port: ' + sys.argv[-1] + ', useIpv6: 0, code: -98, name: EADDRINUSE, message: "
        "address already in use')\n"
        "    sys.exit(1)\nprint('trained on', sys.argv[-1])\n"
    )
    rid = cheap_run(runs_dir, code, ("--master-port", port))
    d = runs_dir / rid
    assert launcher.wait(rid, runs_dir, 20) == "succeeded", (d / "supervisor.log").read_text()
    assert "EADDRINUSE" in (d / "stdout.log.port-retry-0").read_text()
    assert (d / "stdout.log").read_text().startswith("trained on")
    assert str(read_json(d / "status.json")["port"]) != port


@pytest.mark.proc
def test_a_command_that_cannot_start_fails_the_run_with_a_reason(runs_dir):
    rid = "cannot-start"
    d = runs_dir / rid
    d.mkdir()
    write_json_atomic(
        d / "run.json",
        {
            "run_id": rid,
            "config": {"mode": "single"},
            "env": {},
            "argv": ["/nonexistent/python", "-m", "training.train"],
        },
    )
    launcher.start_supervisor(d)  # it comes up, then records the failure itself
    assert launcher.wait(rid, runs_dir, 20) == "failed"
    diag = registry.get_run(rid, runs_dir).diagnosis
    assert diag["key"] == "supervisor" and "/nonexistent/python" in diag["cause"]


@pytest.mark.proc
def test_sigterm_to_the_supervisor_stops_the_run(runs_dir):
    rid = cheap_run(runs_dir, STUBBORN)
    d = runs_dir / rid
    wait_for(
        lambda: (d / "stdout.log").exists() and (d / "stdout.log").read_text().startswith("up"),
        10,
        "the grandchild",
    )
    os.kill(read_json(d / "status.json")["supervisor_pid"], signal.SIGTERM)
    # 5 s grace for the grandchild
    wait_for(lambda: state(rid, runs_dir) == "stopped", 10, "the run to stop")
    wait_for(lambda: alive_of(d) == [], 5, "no process of the run")
    assert len(read_json(d / "status.json")["tree"]) == 2


@pytest.mark.serial
@pytest.mark.proc
def test_killed_supervisor_is_reported_lost_and_listing_never_hangs(runs_dir):
    rid = cheap_run(runs_dir, STUBBORN)
    d = runs_dir / rid
    wait_for(lambda: len(read_json(d / "status.json").get("tree") or []) >= 2, 10, "the grandchild")
    st = read_json(d / "status.json")
    os.kill(st["supervisor_pid"], signal.SIGKILL)
    wait_for(
        lambda: not procs.alive(st["supervisor_pid"], st["supervisor_ct"]),
        5,
        "the supervisor to die",
    )
    (runs_dir / "half-written").mkdir()
    (runs_dir / "half-written" / "status.json").write_text('{"state": "runn')
    t = time.monotonic()
    recs = {r.run_id: r for r in registry.list_runs(runs_dir)}
    assert time.monotonic() - t < 2
    assert recs[rid].state == "lost"
    # computed on read: the listing wrote nothing
    assert read_json(d / "status.json")["state"] == "running"
    assert recs["half-written"].state == "unreadable"  # a torn status.json is damaged (issue 24)
    # the training processes outlived their supervisor; stop ends them and records the end
    assert alive_of(d)
    assert launcher.stop(rid, runs_dir, grace_s=0.5) == "stopped"
    wait_for(lambda: alive_of(d) == [], 5, "no process of the run")
    assert read_json(d / "status.json")["state"] == "stopped" and state(rid, runs_dir) == "stopped"


# cpu_only: gpus=(0,) is refused
def test_bad_configs_are_refused_before_anything_starts(runs_dir, cpu_only):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    bad = [
        cfg(mode="ddp", nproc=2, batch_size=33),
        cfg(gpus=(0,)),
        cfg(name="a/b"),
        cfg(model="vgg"),
        cfg(dataset="imagefolder:/nope"),
        cfg(extra_env={"1X": "y"}),
        cfg(mode="ddp", nproc=1, nnodes=2),
        cfg(mode="dp", nproc=2),
        cfg(mode="ddp", nproc=0),
    ]
    for c in bad:
        with pytest.raises(ConfigError):
            launcher.launch(c, runs_dir)
    with pytest.raises(ConfigError):
        sweeps.launch_sweep([cfg(), cfg(mode="ddp", nproc=2, batch_size=33)], runs_dir)
    assert list(runs_dir.iterdir()) == []
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


@pytest.mark.proc
def test_two_nodes_over_localhost_form_one_job(runs_dir):
    """Two torchrun agents of two ranks each: one job of four devices, every one counted once."""
    from lab.views.compare.figures import run_figures
    from lab.views.compare.scaling import efficiency
    from tests.helpers.compare_runs import load_run

    port = ports.free_port()
    c = cfg(mode="ddp", nproc=2, nnodes=2, node_rank=0, rdzv_endpoint=f"127.0.0.1:{port}")
    rid = launcher.launch(c, runs_dir)
    d = runs_dir / rid
    run = read_json(d / "run.json")
    other = run["other_nodes"]
    assert len(other) == 1 and other[0][other[0].index("--node-rank") + 1] == "1"
    env = dict(os.environ) | run["env"]
    node1 = subprocess.Popen(
        other[0], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        out, _ = node1.communicate(timeout=120)
    finally:
        if node1.poll() is None:
            os.killpg(node1.pid, signal.SIGKILL)
    assert node1.returncode == 0, out.decode()[-2000:]
    assert launcher.wait(rid, runs_dir, 60) == "succeeded"
    summary = registry.get_run(rid, runs_dir).summary
    assert summary["world_size"] == 4 and summary["nnodes"] == 2 and summary["backend"] == "gloo"
    assert (
        summary["devices"] == ["cpu0", "cpu1", "cpu2", "cpu3"] and len(summary["peak_mem_mib"]) == 4
    )
    assert run_figures(load_run(d)).device_count == 4
    # a speedup of 2 over four devices
    assert efficiency("strong", 2.0, run_figures(load_run(d)).device_count, 1.0, 1) == 0.5


@pytest.mark.proc
def test_sweep_runs_one_after_another_and_stops_as_a_whole(runs_dir):
    sweep_id, ids = sweeps.launch_sweep(
        [cfg(mode="single", max_steps=1), cfg(mode="dp", max_steps=1)], runs_dir
    )
    assert state(ids[1], runs_dir) == "queued"
    assert [read_json(runs_dir / r / "run.json")["sweep_id"] for r in ids] == [sweep_id] * 2
    assert [launcher.wait(r, runs_dir, 120) for r in ids] == ["succeeded"] * 2
    first, second = (read_json(runs_dir / r / "status.json") for r in ids)
    assert second["started_at"] >= first["ended_at"]

    long = cfg(mode="single", max_steps=0, epochs=1000)
    sweep_id, ids = sweeps.launch_sweep([long, long], runs_dir)
    wait_for(lambda: state(ids[0], runs_dir) == "running", 30, "the first run to start")
    assert sweeps.stop_sweep(sweep_id, runs_dir) == {r: "stopped" for r in ids}
    for r in ids:
        wait_for(lambda r=r: alive_of(runs_dir / r) == [], 5, "no process of the sweep")
    assert not (runs_dir / ids[1] / "stdout.log").exists()  # never started
