"""Slurm runs on a real one-node cluster (tests/slurm_cluster.py):
lab/engine/supervise/slurm_watch.py, slurm_cmd.py and the launcher's Slurm path, end to end.

A 2-process DDP run of the trainer and one of a user's script (``python -m lab launch --script ...
--backend slurm``, its curves linked from its working folder) succeed with their events read back; a
run stopped from the Live page ends stopped with nothing left on the node; a job that asks for more
than the partition allows waits with Slurm's reason (or is refused with sbatch's words), never
silently; a job killed at its time limit fails with the TIMEOUT diagnosis; a job Slurm forgot
without an end is lost. Runs are tiny (a few steps of 8x8 images, one thread per process); the file
takes about a minute and a half."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.engine import logs, registry
from lab.engine.launch import launcher
from lab.engine.launch import slurm_job as slurm
from lab.engine.spec.run import RunConfig, script_run
from lab.engine.supervise.slurm_watch import SlurmWatch
from lab.runfolder import JOB_EXIT, JOB_SBATCH, REPO_ROOT, RUN_JSON, read_json, write_json_atomic
from tests import slurm_cluster
from tests.e2e_helpers import processes_mentioning
from tests.helpers.engine_runs import sleeper, wait_for

pytestmark = pytest.mark.slurm
# ddp_digits.py's lines
PRINTED = re.compile(r"^(?:\[default0\]:)?epoch \d+ step (\d+) loss ([0-9.]+)", re.M)
TINY = dict(
    max_steps=3,
    image_size=8,
    batch_size=32,
    log_every=1,
    checkpoint="none",
    extra_env={"OMP_NUM_THREADS": "1"},
)


@pytest.fixture(scope="module")  # stopped after this module's last test, by a slurm test
def cluster():
    why = slurm_cluster.missing()
    if why:  # only reached under CI (conftest skips elsewhere): a missing Slurm is an error there
        pytest.fail(f"Slurm is needed under CI: {why}")
    c = slurm_cluster.start()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(c.conf))
        mp.setenv("LAB_SLURM_POLL_S", "0.5")
        yield c
    c.stop()


@pytest.fixture
def runs(cluster, runs_dir) -> Path:
    """A test's runs folder; whatever it left live is stopped (scancel) so no watcher outlives the
    cluster."""
    yield runs_dir
    for rec in registry.list_runs(runs_dir):
        if rec.state in ("queued", "starting", "running"):
            launcher.stop(rec.run_id, runs_dir)


def slurm_cfg(**kw) -> RunConfig:
    return RunConfig(**dict(TINY, backend="slurm", **kw))


def wait_state(
    run_id: str, root: Path, states: tuple[str, ...], timeout_s: float = 90
) -> registry.RunRecord:
    deadline = time.monotonic() + timeout_s
    while True:
        rec = registry.get_run(run_id, root)
        if rec.state in states:
            return rec
        assert time.monotonic() < deadline, (
            f"{run_id} is {rec.state} (slurm {rec.slurm}), never {states}: "
            f"{logs.tail(rec.run_dir, 30)}"
        )
        time.sleep(0.3)


def scalars(run_dir: str) -> dict:
    from lab.events import LogdirReader
    from lab.views.runscalars import run_scalars

    return run_scalars(LogdirReader(run_dir))


def test_ddp_trainer_run_succeeds_with_events_and_per_rank_logs(runs):
    run_id = launcher.launch(slurm_cfg(mode="ddp", nproc=2, cpus_per_task=2), runs)
    rec = wait_state(run_id, runs, ("succeeded", "failed", "stopped", "lost"))
    assert rec.state == "succeeded", rec.diagnosis
    assert (
        rec.backend == "slurm"
        and rec.slurm["job_id"].isdigit()
        and rec.slurm["state"] == "COMPLETED"
    )
    assert rec.slurm["nodes"] == slurm_cluster.socket.gethostname().split(".")[0]
    run_dir = Path(rec.run_dir)
    assert (run_dir / JOB_SBATCH).read_text() == slurm.build_sbatch(
        slurm_cfg(mode="ddp", nproc=2, cpus_per_task=2), run_dir
    )
    assert read_json(run_dir / JOB_EXIT)["exit_code"] == 0
    # where Compare says it ran
    assert read_json(run_dir / RUN_JSON)["recorded_on"] == "Slurm: 1 node x CPU (gloo)"
    got = scalars(rec.run_dir)
    assert list(got["train/loss"].step) == [1, 2, 3]  # the trainer's events, read back
    assert len(got["sys/node0/host_cpu_pct"].value) >= 1  # the node's own sampler
    assert logs.ranks(rec.run_dir) == [0, 1] and "[rank 1]" in logs.tail(rec.run_dir, 50, rank=1)
    assert rec.summary and rec.summary["world_size"] == 2
    status = json.loads(json.dumps(rec.to_json()))  # what status --json prints
    assert status["backend"] == "slurm" and set(status["slurm"]) == {
        "job_id",
        "state",
        "reason",
        "nodes",
    }


def lab(runs: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m lab ...`` as a user types it, on the test cluster (SLURM_CONF is in
    os.environ)."""
    return subprocess.run(
        [sys.executable, "-m", "lab", *args],
        cwd=REPO_ROOT,
        env=dict(os.environ, LAB_RUNS_DIR=str(runs)),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_user_script_through_launch_script_succeeds_with_its_curves_linked(runs, tmp_path):
    """``launch --script examples/ddp_digits.py --backend slurm``: the job runs the user's script,
    unchanged, in its working folder under torchrun; the watcher links the folder its plain
    ``SummaryWriter()`` chose there (``events_dirs``, as the local supervisor does), and the loss
    read back from it is the loss it printed."""
    work = tmp_path / "work"
    work.mkdir()
    out = lab(
        runs,
        "launch",
        "--json",
        "--script",
        str(REPO_ROOT / "examples" / "ddp_digits.py"),
        "--backend",
        "slurm",
        "--mode",
        "ddp",
        "--nproc",
        "2",
        "--cpus-per-task",
        "2",
        "--cwd",
        str(work),
        "--env",
        "OMP_NUM_THREADS=1",
        "--",
        "--epochs",
        "1",
        "--max-steps",
        "3",
        "--log-every",
        "1",
    )
    assert out.returncode == 0, out.stderr
    launched = json.loads(out.stdout)
    assert launched["kind"] == "script"
    rec = wait_state(launched["run_id"], runs, ("succeeded", "failed", "stopped", "lost"))
    assert rec.state == "succeeded", (rec.diagnosis, logs.tail(rec.run_dir, 30))
    run_dir = Path(rec.run_dir)
    job = (run_dir / JOB_SBATCH).read_text().splitlines()
    assert f"cd {work}" in job  # the script's own folder, not the repository
    assert f"export LAB_RUN_DIR={run_dir}" in job  # the environment of a local script run
    assert read_json(run_dir / RUN_JSON)["recorded_on"] == "Slurm: 1 node x CPU (gloo)"
    status = json.loads(lab(runs, "status", rec.run_id, "--json").stdout)  # what a user reads
    assert (status["backend"], status["kind"], status["slurm"]["state"]) == (
        "slurm",
        "script",
        "COMPLETED",
    )
    [linked] = status["events_dirs"]
    # SummaryWriter's default, below the job's working folder
    assert Path(linked).parent == work / "runs"
    printed = [
        (int(m.group(1)), float(m.group(2)))
        for m in PRINTED.finditer((run_dir / "stdout.log").read_text())
    ]
    loss = scalars(linked)["train/loss"]
    assert [s for s, _ in printed] == list(loss.step) == [1, 2, 3]
    # the script's own curve
    assert [v for _, v in printed] == pytest.approx(list(loss.value), abs=1e-6)
    # torchrun's per-rank logs in the run folder, as for a local run
    assert logs.ranks(rec.run_dir) == [0, 1]


def _wait_for_program(script: str) -> None:
    wait_for(lambda: processes_mentioning(script), 60, f"the job to start {script}")


def _left(run_dir: str, script: str) -> list:
    """The processes still alive of a run folder's watcher and its job's program."""
    return processes_mentioning(run_dir) + processes_mentioning(script)


def test_stop_from_the_live_page_cancels_the_job_and_leaves_nothing(runs):
    from streamlit.testing.v1 import AppTest

    from lab.views.text import md_escape

    # a script that sleeps, not the trainer training flat out: the job's processes are the subject
    script = sleeper(runs)
    run_id = launcher.launch(script_run(script, backend="slurm"), runs)
    rec = wait_state(run_id, runs, ("running",))
    _wait_for_program(script)  # the job's own program, on this node
    at = AppTest.from_file(str(REPO_ROOT / "pages" / "2_Live.py"), default_timeout=30)
    at.run()
    assert at.selectbox(key="live_run").value == run_id
    # the page escapes what it writes
    shown = md_escape(f"Slurm job {rec.slurm['job_id']}: RUNNING on ")
    assert any(shown in c.value for c in at.caption), [c.value for c in at.caption]
    at.button(key="live_stop").click()
    at.run(timeout=60)
    assert not at.exception
    rec = registry.get_run(run_id, runs)
    assert rec.state == "stopped" and rec.slurm["state"] == "CANCELLED"
    deadline = time.monotonic() + 5  # the watcher exits right after recording the end
    while _left(rec.run_dir, script) and time.monotonic() < deadline:
        time.sleep(0.2)
    # scancel ended every step on the node, the job's program with it; the watcher is gone
    assert _left(rec.run_dir, script) == []


def test_stop_of_a_run_whose_watcher_died_cancels_the_job(runs, cluster):
    """The job outlives its watcher (the run reads lost); stop then ends it through Slurm itself."""
    import signal

    script = sleeper(runs)
    run_id = launcher.launch(script_run(script, backend="slurm"), runs)
    rec = wait_state(run_id, runs, ("running",))
    _wait_for_program(script)
    os.kill(registry.status(rec.run_dir)["supervisor_pid"], signal.SIGKILL)
    rec = wait_state(run_id, runs, ("lost",), timeout_s=10)
    job = rec.slurm["job_id"]
    # still on the node
    assert "RUNNING" in cluster.run("squeue", "-h", "-j", job, "-o", "%T").stdout
    with pytest.raises(registry.RunIsLive):  # its job may still write into the folder
        registry.delete_run(run_id, runs)
    assert launcher.stop(run_id, runs) == "stopped"
    deadline = time.monotonic() + 30
    while (
        cluster.run("squeue", "-h", "-t", "all", "-j", job, "-o", "%T").stdout.strip()
        != "CANCELLED"
    ):
        assert time.monotonic() < deadline, cluster.run(
            "squeue", "-h", "-t", "all", "-j", job
        ).stdout
        time.sleep(0.3)
    assert _left(rec.run_dir, script) == []


def test_more_than_the_partition_allows_waits_with_the_reason_or_is_refused(runs):
    from lab.views.live.nodes import job_lines

    # the cluster has one node
    nodes = launcher.launch(slurm_cfg(mode="ddp", nproc=1, nnodes=2), runs)
    # over MaxTime
    longer = launcher.launch(slurm_cfg(time=f"{slurm_cluster.MAX_TIME_MIN * 2}"), runs)
    for run_id, reason in ((nodes, "PartitionNodeLimit"), (longer, "PartitionTimeLimit")):
        deadline = time.monotonic() + 30
        while (registry.get_run(run_id, runs).slurm or {}).get("reason") != reason:
            assert time.monotonic() < deadline, registry.get_run(run_id, runs).slurm
            time.sleep(0.3)
        rec = registry.get_run(run_id, runs)
        assert rec.state == "queued" and "it will not start as asked" in job_lines(rec)[1]
        assert launcher.stop(run_id, runs) == "stopped"
    with pytest.raises(
        launcher.LaunchError, match="Slurm refused the job: invalid partition specified: nosuch"
    ):
        launcher.launch(slurm_cfg(partition="nosuch"), runs)
    refused = [r for r in registry.list_runs(runs) if r.state == "failed"]
    assert len(refused) == 1 and refused[0].diagnosis["key"] == "slurm_refused"


def test_a_job_killed_at_its_time_limit_fails_with_the_timeout_diagnosis(runs, cluster):
    cfg = slurm_cfg(time="1")
    run_dir = runs / "sleeps"
    run_dir.mkdir()
    write_json_atomic(
        run_dir / RUN_JSON, {"run_id": run_dir.name, "config": cfg.to_dict(), "created_at": None}
    )
    (run_dir / JOB_SBATCH).write_text(
        slurm.script_sbatch(cfg, run_dir, ["-c", "import time; time.sleep(600)"])
    )
    launcher.start_supervisor(run_dir)
    rec = wait_state(run_dir.name, runs, ("running",))
    # Slurm counts limits in minutes and checks them every 30 s: moving the job's end to a moment
    # from now has it killed at the next check, as it would be a minute in. slurmctld refuses an end
    # already past ("Invalid time specified"), and a bare "now" in whole seconds can be by the time
    # scontrol reaches it, so the end is a few seconds ahead.
    end = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 3))
    update = cluster.run("scontrol", "update", f"JobId={rec.slurm['job_id']}", f"EndTime={end}")
    assert update.returncode == 0, update.stderr
    rec = wait_state(run_dir.name, runs, ("failed", "succeeded", "stopped", "lost"), timeout_s=60)
    assert rec.state == "failed" and rec.slurm["state"] == "TIMEOUT", (
        rec.state,
        rec.slurm,
        rec.diagnosis,
    )
    assert (
        rec.diagnosis["key"] == "slurm_timeout" and "time limit (time 1)" in rec.diagnosis["cause"]
    )
    assert not (run_dir / JOB_EXIT).exists()  # killed: the script never reached its end


def test_a_job_slurm_forgot_is_lost_unless_it_recorded_its_end(runs):
    run_dir = runs / "forgotten"
    run_dir.mkdir()
    write_json_atomic(run_dir / RUN_JSON, {"run_id": run_dir.name, "config": slurm_cfg().to_dict()})
    assert SlurmWatch(run_dir, 0.1).follow("999999") == "lost"  # squeue: "Invalid job id specified"
    rec = registry.get_run(run_dir.name, runs)
    assert (
        rec.state == "lost"
        and "no longer knows job 999999" in registry.status(run_dir)["lost_reason"]
    )
    # the Live page's box
    assert rec.diagnosis["key"] == "slurm_gone" and "stdout.log" in rec.diagnosis["fix"]
    write_json_atomic(run_dir / JOB_EXIT, {"exit_code": 0})
    assert SlurmWatch(run_dir, 0.1).follow("999999") == "succeeded"


def _lab_sweep(root: Path, *args: str) -> dict:
    env = {**os.environ, "LAB_RUNS_DIR": str(root)}
    res = subprocess.run(
        [sys.executable, "-m", "lab", "sweep", "--backend", "slurm", "--json", *args],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_a_slurm_sweep_runs_one_job_after_another(runs, cluster):
    # torchrun's jobs of a script that sleeps 2 s: Slurm's ordering is the subject (the trainer's
    # Slurm runs succeed above; its sweep is submitted below)
    doc = _lab_sweep(
        runs, "--script", sleeper(runs, 2), "--modes", "ddp", "--devices", "1,2",
        "--env", "OMP_NUM_THREADS=1",
    )  # fmt: skip
    first, second = doc["run_ids"]
    assert (
        f"--dependency=afterany:{registry.get_run(first, runs).slurm['job_id']}"
        in (runs / second / JOB_SBATCH).read_text()
    )  # submitted to start once the first ended, whatever its end
    waited = set()
    jobs = {registry.get_run(r, runs).slurm["job_id"] for r in (first, second)}
    while registry.get_run(first, runs).state not in ("succeeded", "failed"):
        # Side by side is Slurm's own view, one squeue snapshot: each run's recorded state lags
        # its job by a poll, so the second can read running while the first's end is unrecorded.
        running = set(cluster.run("squeue", "-h", "-t", "RUNNING", "-o", "%i").stdout.split())
        assert not jobs <= running, "the second job ran beside the first"
        waited.add((registry.get_run(second, runs).slurm or {}).get("reason"))
        time.sleep(0.2)  # polling status.json and squeue
    assert "Dependency" in waited, waited  # Slurm held it for the first job
    for rid in (first, second):
        rec = wait_state(rid, runs, ("succeeded", "failed"), timeout_s=180)
        assert rec.state == "succeeded", logs.tail(rec.run_dir, 30)
    assert [read_json(runs / r / RUN_JSON)["config"]["nproc"] for r in (first, second)] == [1, 2]


def test_a_script_sweep_varying_its_own_flag_runs_on_slurm(runs, cluster, tmp_path):
    """A user's script swept over one of its own flags (``--vary lr=...``) as Slurm jobs, one after
    another, as the trainer's sweep runs: each job gets its value (the script prints the arguments
    it was given), each run.json records it. The script imports nothing: an example's training
    under Slurm is tested above."""
    work = tmp_path / "work"
    work.mkdir()  # where the job runs the script
    script = work / "args.py"
    script.write_text("import sys\nprint('ARGS', ' '.join(sys.argv[1:]), flush=True)\n")
    doc = _lab_sweep(
        runs, "--script", str(script), "--cwd", str(work), "--modes", "single",
        "--vary", "lr=0.1,0.02", "--", "--epochs", "1",
    )  # fmt: skip
    first, second = doc["run_ids"]
    assert "--dependency=afterany:" in (runs / second / JOB_SBATCH).read_text()
    for rid, lr in ((first, "0.1"), (second, "0.02")):
        rec = wait_state(rid, runs, ("succeeded", "failed"), timeout_s=180)
        assert rec.state == "succeeded", logs.tail(rec.run_dir, 30)
        run = read_json(runs / rid / RUN_JSON)
        assert run["kind"] == "script" and run["varied"] == {"lr": lr}
        assert f"--lr {lr}" in (runs / rid / JOB_SBATCH).read_text()
        said = logs.tail(rec.run_dir, 30)
        assert "ARGS --epochs 1 --lr " + lr in said, said


def test_stopping_a_slurm_sweep_cancels_every_job(runs, cluster):
    doc = _lab_sweep(runs, "--modes", "single,ddp", "--devices", "2", "--epochs", "500")
    env = {**os.environ, "LAB_RUNS_DIR": str(runs)}
    res = subprocess.run(
        [sys.executable, "-m", "lab", "stop", doc["sweep_id"]],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert {registry.get_run(r, runs).state for r in doc["run_ids"]} == {"stopped"}
    deadline = time.monotonic() + 30
    while cluster.run("squeue", "-h").stdout.strip() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert cluster.run("squeue", "-h").stdout.strip() == ""


def test_a_stalled_slurm_run_gets_the_stalled_finding_with_stacks(runs):
    """The watcher of a Slurm job runs the same health watch as a local supervisor: a job whose
    first batch waits a minute (``--data-delay-ms 60000``) is flagged ``stalled`` after
    ``--stall-after 3``, with the stacks of its processes on this node (``scontrol listpids``)."""
    run_id = launcher.launch(slurm_cfg(data_delay_ms=60_000, stall_after=3), runs)
    wait_state(run_id, runs, ("running",))
    run_dir = Path(registry.get_run(run_id, runs).run_dir)
    # Start-up counts from launch, so on a loaded machine the first dump (3 s in) may catch Python
    # still starting; the watch dumps again 1, 2, 4 and 8 thresholds later: wait for a
    # dump that holds the trainer's own frames.
    deadline = time.monotonic() + 90
    seen: list[str] = []
    while True:
        health = {f["key"]: f for f in registry.get_run(run_id, runs).health}
        stacks = (health.get("stalled") or {}).get("evidence", {}).get("stacks") or []
        assert all((run_dir / s).is_file() for s in stacks)
        seen = [(run_dir / s).read_text() for s in stacks]
        if any("training" in text for text in seen):
            break
        assert time.monotonic() < deadline, (
            health,
            [text[-1500:] for text in seen],
            logs.tail(registry.get_run(run_id, runs).run_dir, 30),
        )
        time.sleep(0.5)  # polling status.json
    launcher.stop(run_id, runs)
    assert wait_state(run_id, runs, ("stopped",)).state == "stopped"


def _jobs_named(cluster, run_id: str) -> list[str]:
    """The ids of every job, in any state, that the run's job script submitted (its job name)."""
    out = cluster.run("squeue", "-h", "-t", "all", "-n", f"lab-{run_id}", "-o", "%i").stdout
    return out.split()


def test_the_watcher_of_a_pending_job_that_dies_is_replaced_without_submitting_again(runs, cluster):
    """A job that waits (two nodes asked of a one-node partition) outlives its watcher (the OOM
    killer). The next command's requeue asks the run's backend which watch to start: a Slurm
    run's new watcher follows the job already submitted; it never runs sbatch again (a second
    job), and the run does not read ``succeeded`` because an sbatch exited 0."""
    import signal

    from lab.engine import procs
    from lab.engine.supervise.adopt import adopt_orphans

    run_id = launcher.launch(slurm_cfg(mode="ddp", nproc=1, nnodes=2), runs)
    deadline = time.monotonic() + 30
    while (registry.get_run(run_id, runs).slurm or {}).get("reason") != "PartitionNodeLimit":
        assert time.monotonic() < deadline, registry.get_run(run_id, runs).slurm
        time.sleep(0.3)
    [job] = _jobs_named(cluster, run_id)
    dead = registry.status(runs / run_id)["supervisor_pid"]
    os.kill(dead, signal.SIGKILL)
    assert procs.wait_until(lambda: not procs.alive(dead), 10)
    assert adopt_orphans(runs) == [run_id]  # what the next `lab` command does
    assert adopt_orphans(runs) == []  # and the one after it: the run is watched again, once
    st = registry.status(runs / run_id)
    assert procs.wait_until(
        lambda: procs.alive(
            registry.status(runs / run_id).get("supervisor_pid"),
            registry.status(runs / run_id).get("supervisor_ct"),
        ),
        15,
    ), st
    time.sleep(3)  # several of the new watcher's polls (LAB_SLURM_POLL_S=0.5)
    rec = registry.get_run(run_id, runs)
    assert _jobs_named(cluster, run_id) == [job]  # the one job, never submitted again
    assert rec.state == "queued" and rec.slurm["job_id"] == job, (rec.state, rec.slurm)
    assert rec.slurm["reason"] == "PartitionNodeLimit"
    assert launcher.stop(run_id, runs) == "stopped"  # the new watcher cancels it
    assert registry.get_run(run_id, runs).slurm["state"] == "CANCELLED"
