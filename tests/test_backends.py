"""The two backends, local and Slurm: their facts (``lab.engine.spec.backends``) and their actions
(``lab.engine.launch.backends``), each asked of a run the way the launcher, the previews and the
sweeps ask them. No process starts here: a Slurm job's submission and cancellation run on the
test cluster (tests/test_slurm_cluster.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lab.engine.launch import backends, commands, slurm_job
from lab.engine.slurm import cmd as slurm_cmd
from lab.engine.slurm import diagnoses
from lab.engine.spec import backends as facts
from lab.engine.spec.run import RunConfig, omp_threads, script_run, world_size
from lab.runfolder import JOB_SBATCH, STATUS_JSON, write_json_atomic


def slurm(**kw) -> RunConfig:
    return RunConfig(backend="slurm", **kw)


def test_a_run_is_local_unless_it_says_slurm_in_any_form_it_comes_in():
    assert facts.named(None).name == facts.named("").name == facts.LOCAL
    assert facts.of(RunConfig()).runs_here and not facts.of(slurm()).runs_here
    assert facts.of({"backend": "slurm"}).name == facts.SLURM  # run.json's config
    assert facts.of({}).name == facts.LOCAL  # a run.json older than backends
    # the actions extend the facts: one object answers both
    assert isinstance(backends.of(slurm()), facts.Slurm)
    assert isinstance(backends.named("local"), facts.Local)


def test_gpus_cores_and_threads_are_this_machines_or_the_jobs():
    here = RunConfig(mode="dp", gpus=(0, 1, 2))
    job = slurm(mode="dp", gpus_per_node=4, cpus_per_task=6)
    assert facts.of(here).node_gpus(here) == 3 and facts.of(job).node_gpus(job) == 4
    assert world_size(here) == 3 and world_size(job) == 4
    # a local run shares this machine's cores; a job has its CPUs per task whatever this has
    assert facts.of(here).cores(here, 16) == 16 and facts.of(job).cores(job, 16) == 6
    assert omp_threads(job, 1) == 6 and omp_threads(here, 16) == 16
    ddp_job = slurm(mode="ddp", nproc=2)  # no CPUs per task given: the job's tasks
    assert facts.of(ddp_job).cores(ddp_job, 16) == ddp_job.processes


def test_where_a_run_ran_is_this_machine_or_the_jobs_nodes():
    assert facts.of(RunConfig()).where(RunConfig(), "box: 2 x A100") == "box: 2 x A100"
    one = slurm(mode="ddp", nproc=2)
    assert facts.of(one).where(one, "box") == "Slurm: 1 node x CPU (gloo)"
    two = slurm(mode="ddp", nnodes=2, gpus_per_node=1, partition="gpu")
    assert facts.of(two).where(two, "box") == "Slurm: 2 nodes x 1 GPU, partition gpu"


def test_each_backend_says_what_stop_does_and_which_program_watches_its_runs():
    local, job = facts.named("local"), facts.named("slurm")
    assert "SIGTERM" in local.stop_help and "scancel" in job.stop_help
    # one program watches a run of either backend; the backend names the watch it runs
    assert local.watcher == job.watcher == "lab.engine.supervise.supervisor"
    assert (Path(__file__).parents[1] / (local.watcher.replace(".", "/") + ".py")).is_file()
    from lab.engine.supervise.supervisor import WATCHES

    assert (local.watch, job.watch) == ("start", "submit")
    run, sweep = Path("/runs/a"), Path("/runs/.sweeps/s.json")
    # a waiting run whose watcher died: a local one queues again (a sweep's runs together), a
    # submitted job is followed, never submitted again
    assert local.rewatch(run, None) == ("/runs/a",)
    assert local.rewatch(run, sweep) == ("--sweep", "/runs/.sweeps/s.json")
    assert job.rewatch(run, sweep) == job.rewatch(run, None) == ("/runs/a", "--watch", "follow")
    assert {local.watch, job.watch, job.rewatch(run, None)[-1]} <= set(WATCHES)


def test_a_local_command_is_its_processes_and_a_slurm_one_the_submission(tmp_path):
    cfg = RunConfig(mode="ddp", nproc=2)
    argv, env = backends.build_command(cfg, tmp_path, 4321, base_env={"A": "1"}, uuids={})
    assert (argv, env) == commands.local_command(cfg, tmp_path, 4321, {"A": "1"}, None, {})
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"] and env["A"] == "1"
    job = slurm(mode="ddp", nproc=2)
    argv, env = backends.build_command(job, tmp_path, 4321, base_env={"A": "1"})
    assert argv[0] == "sbatch" and argv[-1] == str(tmp_path / JOB_SBATCH)
    assert env == {"A": "1"}  # the job script sets the job's environment, not this command


def test_only_a_slurm_run_has_a_job_script_and_its_own_preflight_lines(tmp_path):
    asked: list[str] = []

    def here() -> list[str]:
        asked.append("here")
        return ["this machine's devices"]

    local, job = RunConfig(), slurm()
    assert backends.of(local).job_script(local, tmp_path) == ""
    assert backends.of(job).job_script(job, tmp_path) == slurm_job.build_sbatch(job, tmp_path)
    assert backends.of(local).lines(local, tmp_path, here) == ["this machine's devices"]
    lines = backends.of(job).lines(job, tmp_path, here)
    assert lines[0].startswith("Slurm job: 1 node") and asked == ["here"]  # not read for a job


def test_a_slurm_script_run_in_a_node_local_folder_is_warned_a_local_one_is_not():
    tmp = script_run("train.py", cwd="/tmp/work", backend="slurm")
    assert backends.of(tmp).warnings(tmp) and "/tmp" in backends.of(tmp).warnings(tmp)[0]
    shared = script_run("train.py", cwd="/home/me/work", backend="slurm")
    assert backends.of(shared).warnings(shared) == []
    here = script_run("train.py", cwd="/tmp/work")
    assert backends.of(here).warnings(here) == []


@pytest.mark.parametrize(
    "diagnosis, refused",
    [
        (diagnoses.refused("Invalid partition name specified"), True),
        (diagnoses.unavailable("sbatch: command not found"), True),
        (diagnoses.gone("42"), False),  # submitted, then lost: not a refusal of the start
        (None, False),
    ],
)
def test_a_slurm_start_is_refused_only_when_the_job_was_not_submitted(tmp_path, diagnosis, refused):
    write_json_atomic(
        tmp_path / STATUS_JSON, {"diagnosis": diagnosis.to_dict() if diagnosis else None}
    )
    why = backends.named("slurm").refusal(tmp_path)
    assert (why is not None) == refused
    if refused:
        assert why.startswith(diagnosis.cause) and why.endswith(diagnosis.fix)
    assert backends.named("local").refusal(tmp_path) is None


def test_after_a_stop_only_a_slurm_job_with_an_id_is_cancelled(monkeypatch):
    # the cancels are recorded, not sent: the real scancel of a stop runs on the test cluster
    # (tests/test_slurm_cluster.py); here only which backend asks for one, and for which job
    cancelled: list[str] = []
    monkeypatch.setattr(slurm_cmd, "cancel_quietly", lambda job_id: cancelled.append(job_id))
    backends.named("local").end_leftover({"slurm": {"job_id": "7"}})
    backends.named("slurm").end_leftover({"slurm": {}})
    backends.named("slurm").end_leftover({})
    assert cancelled == []
    backends.named("slurm").end_leftover({"slurm": {"job_id": 42}})
    assert cancelled == ["42"]
