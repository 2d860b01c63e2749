"""A run as a Slurm job without a cluster: lab/engine/launch/slurm_job.py (the job script,
exactly; the checks; the pre-flight), lab/engine/slurm/states.py (the state map, squeue/sacct
answers, pending notes, diagnoses), lab/engine/slurm/node_sampler.py (a sample written and read
back), and how the request, the launcher and the command line take the backend.
tests/test_slurm_cluster.py runs the same on a real one-node cluster."""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys

import pytest

from lab.engine.launch import backends, commands, environment, form, launcher, request, sweeps
from lab.engine.launch import slurm_job as slurm
from lab.engine.launch.config import problems
from lab.engine.slurm import cmd as slurm_cmd
from lab.engine.slurm import diagnoses as slurm_diag
from lab.engine.slurm import states as ss
from lab.engine.slurm.node_sampler import NodeSampler, job_gpus, node_index
from lab.engine.spec.run import ConfigError, RunConfig
from lab.runfolder import REPO_ROOT
from tests.slurm_cluster import Cluster

PY = "/venv/bin/python"


def sl(**kw) -> RunConfig:
    return RunConfig(backend="slurm", **kw)


def test_build_sbatch_of_a_two_node_gpu_ddp_run_exactly():
    cfg = sl(
        mode="ddp",
        nnodes=2,
        nproc=4,
        gpus_per_node=4,
        cpus_per_task=16,
        time="2:00:00",
        partition="gpu",
        account="proj",
        sbatch_args=(" --qos=high ",),
        extra_env={"NCCL_DEBUG": "INFO", "X": "a b"},
    )
    text = slurm.build_sbatch(cfg, "/shared/runs/r1", python=PY)
    trainer = (
        "-m training.train --mode ddp --model tinycnn --dataset digits --epochs 3 --max-steps 0 "
        "--batch-size 64"
        " --lr 0.05 --workers 0 --seed 0 --log-dir /shared/runs/r1 --log-every 10 --val-every 0"
        " --image-size 32 --checkpoint last --grad-norm-warn 0.0 --device cuda"
    )
    assert (
        text
        == f"""#!/bin/bash
# Parallel Training Lab run r1, written by the lab; to run it again by hand:
#   sbatch --parsable /shared/runs/r1/job.sbatch
#SBATCH --job-name=lab-r1
#SBATCH --output=/shared/runs/r1/stdout.log
#SBATCH --open-mode=append
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=16
#SBATCH --gpus-per-node=4
#SBATCH --time=2:00:00
#SBATCH --partition=gpu
#SBATCH --account=proj
#SBATCH --qos=high
set -u
cd {REPO_ROOT}
export CUDA_DEVICE_ORDER=PCI_BUS_ID
export OMP_NUM_THREADS=4
export PYTHONUNBUFFERED=1
export TORCHELASTIC_ERROR_FILE=/shared/runs/r1/error.json
export PYTHONPATH={REPO_ROOT}${{PYTHONPATH:+:$PYTHONPATH}}
export NCCL_DEBUG=INFO
export X='a b'
# the rendezvous: the job's first node (where this script runs), on a port free there
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
port=$({PY} -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
# one device sampler per node, beside the training (sys/node<k>/ in the run folder)
srun --overlap --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=0 --chdir={REPO_ROOT} \
{PY} -m lab.engine.slurm.node_sampler \
/shared/runs/r1 --gpus auto &
sampler=$!
srun --nodes=2 --ntasks-per-node=1 --cpus-per-task=16 {PY} \
-m torch.distributed.run --nnodes 2 --nproc-per-node 4 \
--rdzv-backend c10d --rdzv-endpoint "$head_node:$port" --rdzv-id "$SLURM_JOB_ID" \
--log-dir /shared/runs/r1/logs --tee 3 \
{trainer}
rc=$?
# srun passes SIGUSR1 on to the sampler, which then ends (SIGTERM would make srun kill the step)
kill -USR1 "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
printf '{{"exit_code": %d, "ended_at": "%s"}}\\n' "$rc" "$(date -u +%Y-%m-%dT%H:%M:%S+00:00)" > \
/shared/runs/r1/job_exit.json.tmp \
&& mv /shared/runs/r1/job_exit.json.tmp /shared/runs/r1/job_exit.json
exit "$rc"
""".replace(" \\\n", " ")
    )


@pytest.mark.proc
def test_build_sbatch_single_on_the_cpu_and_a_user_script(tmp_path):
    text = slurm.build_sbatch(sl(), tmp_path / "r2", python=PY)
    assert (
        "#SBATCH --nodes=1" in text
        and "--cpus-per-task" not in text
        and "--gpus-per-node" not in text
    )
    # the partition's defaults
    assert "#SBATCH --time" not in text and "#SBATCH --partition" not in text
    step = [ln for ln in text.splitlines() if ln.startswith("srun --nodes")][0]
    assert step.startswith(
        f"srun --nodes=1 --ntasks-per-node=1 {PY} -m training.train --mode single"
    )
    assert step.endswith("--device cpu") and "torch.distributed.run" not in step
    assert "--gpus none &" in text  # no GPU asked: the sampler reads none of the node's
    assert "CUDA_VISIBLE_DEVICES" not in text  # Slurm's to set
    script = slurm.script_sbatch(
        sl(mode="ddp", nproc=2), tmp_path / "r3", ["train.py", "--epochs", "3", "it's"]
    )
    step = [ln for ln in script.splitlines() if ln.startswith("srun --nodes")][0]
    # the user's argv, quoted, after torchrun
    assert step.endswith("--tee 3 train.py --epochs 3 'it'\"'\"'s'")
    assert f"cd {tmp_path / 'r3'}" in script.splitlines()  # relative outputs land in the run folder
    for t in (text, script):  # the shell reads what we wrote
        assert (
            subprocess.run(["bash", "-n"], input=t, text=True, capture_output=True).returncode == 0
        )


@pytest.mark.parametrize(
    "cfg,field,text",
    [
        (RunConfig(backend="cloud"), "backend", "unknown backend 'cloud': use local or slurm"),
        (
            RunConfig(partition="gpu"),
            "partition",
            "partition is an option of a Slurm job: add backend slurm",
        ),
        (RunConfig(sbatch_args=("--qos=x",)), "sbatch_args", "option of a Slurm job"),
        (sl(gpus=(0,)), "gpus", "leave gpus empty and use gpus_per_node"),
        (sl(mode="ddp", nproc=2, nnodes=2, node_rank=1), "node_rank", "leave node_rank 0"),
        (
            sl(mode="ddp", nproc=2, nnodes=2, rdzv_endpoint="h:1"),
            "rdzv_endpoint",
            "leave rdzv_endpoint empty",
        ),
        (sl(partition="gpu part"), "partition", "is not a Slurm name"),
        (sl(time="2 hours"), "time", "use minutes (30), H:MM:SS (2:00:00) or D-HH (1-12)"),
        (sl(gpus_per_node=-1), "gpus_per_node", "must be 0 or more"),
        (
            sl(gpus_per_node=2),
            "gpus_per_node",
            "single mode uses one device, 2 GPUs per node asked",
        ),
        (sl(mode="ddp", nproc=2, gpus_per_node=4), "nproc", "gpus_per_node 4, so use nproc 4"),
        (
            sl(sbatch_args=("--time=5",)),
            "sbatch_args",
            "--time is written by the lab: use time instead",
        ),
        (sl(sbatch_args=("-N2",)), "sbatch_args", "-N is written by the lab: use nnodes instead"),
        (sl(sbatch_args=("--output=x",)), "sbatch_args", "the lab sets it"),
        (sl(sbatch_args=("qos=high",)), "sbatch_args", "is not one sbatch option"),
        (sl(mode="dp", gpus_per_node=3, batch_size=64), "batch_size", "does not split over 3"),
    ],
)
def test_bad_slurm_configs_name_the_fix(cfg, field, text):
    found = [e for e in problems(cfg, 0) if e.field == field]
    assert found and text in found[0].message, [str(e) for e in problems(cfg, 0)]


def test_good_slurm_configs_pass_and_several_nodes_need_no_endpoint():
    assert (
        problems(
            sl(
                mode="ddp",
                nproc=4,
                nnodes=4,
                gpus_per_node=4,
                batch_size=64,
                time="1-12",
                sbatch_args=("--qos=high", "--constraint=a100"),
            ),
            0,
        )
        == []
    )
    assert (
        problems(sl(time="30"), 0) == [] and problems(sl(time="0:30:00", cpus_per_task=8), 0) == []
    )
    # local: still asked
    assert problems(RunConfig(mode="ddp", nproc=1, nnodes=2), 0)[0].field == "rdzv_endpoint"


def test_node_local_runs_folders_are_warned_about(tmp_path):
    assert (
        "under /tmp" in slurm.node_local("/tmp/x/runs") and slurm.node_local("/dev/shm") is not None
    )
    assert slurm.node_local("/shared/lab/runs") is None and slurm.node_local("/tmpfoo") is None
    lines = slurm.preflight_lines(sl(mode="ddp", nproc=2, nnodes=2, cpus_per_task=4), "/tmp/runs")
    assert (
        lines[0]
        == "Slurm job: 2 nodes on the cluster's default partition, the partition's default time "
        "limit."
    )
    assert "4 processes (2 per node x 2 nodes)" in lines[1] and "gloo" in lines[1]
    assert any(ln.startswith("Warning: the runs folder /tmp/runs is under /tmp") for ln in lines)


def test_state_map_and_what_squeue_and_sacct_say():
    assert {
        s: ss.STATE_MAP[s]
        for s in (
            "PENDING",
            "RUNNING",
            "COMPLETED",
            "CANCELLED",
            "TIMEOUT",
            "OUT_OF_MEMORY",
            "NODE_FAIL",
            "PREEMPTED",
            "FAILED",
        )
    } == {
        "PENDING": "queued",
        "RUNNING": "running",
        "COMPLETED": "succeeded",
        "CANCELLED": "stopped",
        "TIMEOUT": "failed",
        "OUT_OF_MEMORY": "failed",
        "NODE_FAIL": "failed",
        "PREEMPTED": "failed",
        "FAILED": "failed",
    }
    job = ss.parse_squeue("12|PENDING|PartitionTimeLimit|\n13|RUNNING|None|vm\n", "12")
    assert (
        job == ss.Job("12", "PENDING", "PartitionTimeLimit", "")
        and job.run_state == "queued"
        and not job.over
    )
    assert ss.parse_squeue("13|RUNNING|None|node[1-2]\n", "13").to_status() == {
        "job_id": "13",
        "state": "RUNNING",
        "reason": "",
        "nodes": "node[1-2]",
    }
    # processes still being cleaned up
    assert ss.parse_squeue("13|COMPLETING|None|vm", "13").over is False
    assert (
        ss.parse_squeue("", "12") is None and ss.parse_squeue("120|RUNNING|None|vm", "12") is None
    )
    acct = ss.parse_sacct("7|CANCELLED by 0|vm|0:15\n", "7")
    assert (acct.state, acct.exit_code, acct.over) == ("CANCELLED", 0, True)
    assert ss.parse_sacct("7|FAILED|vm|2:0", "7").exit_code == 2
    assert ss.parse_job_id("42\n") == "42" and ss.parse_job_id("42;cluster2") == "42"
    with pytest.raises(ValueError):
        ss.parse_job_id("sbatch: error: x")
    assert slurm_cmd.squeue_argv("4") == [
        "squeue",
        "--noheader",
        "--states=all",
        "--jobs=4",
        "--format=%i|%T|%r|%N",
    ]
    assert slurm_cmd.submit_argv("/r/job.sbatch") == ["sbatch", "--parsable", "/r/job.sbatch"]


def test_pending_reasons_and_ends_in_words():
    assert ss.pending_note("Resources").startswith("waiting for the nodes, GPUs or CPUs")
    assert ss.pending_note("PartitionTimeLimit").startswith(
        "it will not start as asked: the time asked is over"
    )
    assert "will not start" in ss.pending_note("PartitionNodeLimit")
    assert "QOS caps the GPUs" in ss.pending_note("QOSMaxGRESPerUser")
    assert "SomethingNew" in ss.pending_note("SomethingNew") and ss.pending_note("") is None
    d = slurm_diag.end_diagnosis(ss.Job("5", "TIMEOUT", "TimeLimit", "vm"), "30")
    assert (d.key, d.cause) == (
        "slurm_timeout",
        "Slurm ended the job at its time limit (time 30) (TIMEOUT).",
    )
    assert "more time" in d.fix and "--resume auto" in d.fix
    assert (
        slurm_diag.end_diagnosis(ss.Job("5", "NODE_FAIL", "", "n3"), "").cause
        == "A node of the job failed (n3) (NODE_FAIL)."
    )
    assert slurm_diag.end_diagnosis(ss.Job("5", "OUT_OF_MEMORY"), "").key == "slurm_out_of_memory"
    # the logs say why a script failed
    assert slurm_diag.end_diagnosis(ss.Job("5", "FAILED"), "") is None
    assert (
        slurm_diag.job_failed(ss.Job("5", "FAILED", exit_code=3)).cause
        == "The job's script exited with exit code 3 (Slurm: FAILED)."
    )
    r = slurm_diag.refused("invalid partition specified: x.")
    assert (r.key, r.cause) == (
        slurm_diag.REFUSED,
        "Slurm refused the job: invalid partition specified: x.",
    )


def test_node_sampler_writes_its_node_and_reads_the_job_gpus(tmp_path):
    from lab.events import LogdirReader

    assert node_index({"SLURM_NODEID": "3"}) == 3 and node_index({}) == 0
    assert job_gpus({"SLURM_JOB_GPUS": "2,3"}) == (2, 3) and job_gpus(
        {"SLURM_STEP_GPUS": "1", "SLURM_JOB_GPUS": "0,1"}
    ) == (1,)
    assert job_gpus({}) == () and job_gpus({"GPU_DEVICE_ORDINAL": "a100"}) == ()
    s = NodeSampler(tmp_path, 1, ())
    values = [s.sample(), s.sample()][-1]
    s.close()
    assert (
        set(values) == {"sys/node1/host_cpu_pct", "sys/node1/host_mem_used_mib"}
        and values["sys/node1/host_mem_used_mib"] > 0
    )
    reader = LogdirReader(str(tmp_path))
    reader.refresh()
    assert reader.run_names() == ["sys/node1"]
    assert list(reader.scalars("sys/node1")["sys/node1/host_cpu_pct"].step) == [0, 1]


def test_request_and_launcher_take_the_backend(tmp_path, monkeypatch):
    cfg, errors = request.run_config(
        {
            "backend": "slurm",
            "mode": "ddp",
            "gpus_per_node": 4,
            "sbatch_args": "--qos=high\n\n --constraint=a100 ",
        },
        8,
    )
    assert errors == [] and (cfg.gpus, cfg.nproc, cfg.sbatch_args) == (
        (),
        4,
        ("--qos=high", "--constraint=a100"),
    )
    # CPU nodes: two gloo ranks
    assert request.run_config({"backend": "slurm", "mode": "ddp"}, 8)[0].nproc == 2
    values = request.form_values(cfg)
    shown = {}
    for f in form.FIELDS:  # as the page reads its widgets: a disabled one gives None
        shown[f.name] = values[f.name] if f.enabled(shown) else None
    assert (
        shown["gpus"] is None
        and shown["node_rank"] is None
        and request.run_config(shown, 8) == (cfg, [])
    )
    argv, env = backends.build_command(cfg, tmp_path / "r", 0, base_env={"A": "1"})
    assert argv == ["sbatch", "--parsable", str(tmp_path / "r" / "job.sbatch")] and env == {
        "A": "1"
    }
    assert "CUDA_VISIBLE_DEVICES" not in environment.run_env(cfg, tmp_path)
    assert commands.other_node_commands(dataclasses.replace(cfg, nnodes=2), tmp_path) == []
    assert RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    p = request.preview(cfg, None, tmp_path)
    assert p.sbatch.startswith("#!/bin/bash") and p.argv[-1] == str(
        tmp_path / "<run-id>" / "job.sbatch"
    )
    assert p.preflight[0].startswith("Slurm job: 1 node")
    assert (
        backends.of(cfg).where(dataclasses.replace(cfg, nnodes=2, partition="gpu"), "here")
        == "Slurm: 2 nodes x 4 GPUs, partition gpu"
    )
    with pytest.raises(ConfigError, match="all on this machine or all on Slurm"):
        sweeps.launch_sweep([cfg, RunConfig(mode="single")], tmp_path)  # a Slurm sweep is whole
    assert not list(tmp_path.iterdir())  # refused before any folder


@pytest.mark.proc
def test_cli_flags_dry_run_and_one_line_errors(runs_dir):
    def lab(*args):
        return subprocess.run(
            [sys.executable, "-m", "lab", *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )

    out = lab(
        "launch",
        "--backend",
        "slurm",
        "--mode",
        "ddp",
        "--nnodes",
        "2",
        "--partition",
        "gpu",
        "--time",
        "30",
        "--sbatch-arg=--qos=high",
        "--dry-run",
    )
    assert out.returncode == 0, out.stderr
    assert "#SBATCH --nodes=2" in out.stdout and "#SBATCH --qos=high" in out.stdout
    assert (
        "sbatch \\\n  --parsable" in out.stdout
        and "Warning: the runs folder" not in out.stdout.split("\n")[0]
    )
    bad = lab("launch", "--backend", "slurm", "--sbatch-arg=--nodes=3")
    assert (
        bad.returncode == 2
        and bad.stderr.strip()
        == "error: sbatch-arg: --nodes is written by the lab: use nnodes instead"
    )
    bad = lab("launch", "--gpus-per-node", "2")
    assert (
        bad.returncode == 2
        and "error: gpus-per-node: gpus_per_node is an option of a Slurm job" in bad.stderr
    )
    assert not list(runs_dir.iterdir())


@pytest.mark.proc
def test_launch_without_slurm_here_is_one_message_and_a_failed_run(runs_dir, monkeypatch, tmp_path):
    """A real launch (the watcher starts, sbatch is not on PATH): refused with what to do, recorded
    failed."""
    from lab.engine import registry

    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    with pytest.raises(
        launcher.LaunchError,
        match="Slurm could not be asked to take the job: sbatch is not on PATH",
    ):
        launcher.launch(sl(), runs_dir)
    [rec] = registry.list_runs(runs_dir)
    assert (
        rec.state == "failed"
        and rec.diagnosis["key"] == "slurm_unavailable"
        and "scontrol ping" in rec.diagnosis["fix"]
    )
    # kept, to read or submit
    assert (runs_dir / rec.run_id / "job.sbatch").read_text().startswith("#!/bin/bash")


@pytest.mark.proc
def test_a_user_script_as_a_slurm_job_from_the_form(runs_dir):
    """My script with "Where to run: slurm": read as the trainer's fields are, checked as a trainer
    run's, and shown as the job script that runs the script, unchanged, in its working folder with a
    script's environment."""
    from lab.engine.launch import script, script_form

    ddp_digits, work = REPO_ROOT / "examples" / "ddp_digits.py", REPO_ROOT / "examples"
    values = {
        "backend": "slurm",
        "script": str(ddp_digits),
        "args": "--epochs 2 --name 'a b'",
        "cwd": str(work),
        "mode": "ddp",
        "gpus_per_node": 2,
        "partition": "gpu",
        "extra_env": "A=1",
    }
    c, errors = script_form.script_config(values, 8)  # this machine's 8 GPUs are none of the job's
    assert errors == [] and (c.backend, c.gpus, c.nproc, c.gpus_per_node, c.partition) == (
        "slurm",
        (),
        2,
        2,
        "gpu",
    )
    assert script.problems(c, 8) == [] and script_form.script_config(
        script_form.form_values(c), 8
    ) == (c, [])
    shown: dict = {}
    for f in script_form.SCRIPT_FIELDS:  # as the page reads its widgets: a disabled one gives None
        shown[f.name] = script_form.form_values(c)[f.name] if f.enabled(shown) else None
    assert (
        shown["gpus"] is None
        and shown["node_rank"] is None
        and script_form.script_config(shown, 8) == (c, [])
    )
    p = script_form.preview(c, None, runs_dir)
    run_dir = runs_dir / "<run-id>"
    assert (
        p.argv == ["sbatch", "--parsable", str(run_dir / "job.sbatch")]
        and p.other_nodes == []
        and p.env == {}
    )
    assert (
        p.preflight[0] == "Slurm job: 1 node on partition gpu, the partition's default time limit."
    )
    assert any(
        line.startswith(f"Curves: event files the script creates below {work}")
        for line in p.preflight
    )
    # the node-local warning exactly when the checkout itself sits in a node-local folder (a CI
    # clone in /tmp)
    node_local = str(work.resolve()).startswith(("/tmp/", "/var/tmp/", "/dev/shm/"))
    assert any("working directory" in line for line in p.preflight) == node_local
    lines = p.sbatch.splitlines()
    assert f"cd {work}" in lines and "#SBATCH --gpus-per-node=2" in lines and "export A=1" in lines
    # what a local script run gets
    assert f"export LAB_RUN_DIR={shlex.quote(str(run_dir))}" in lines
    # Slurm's
    assert not any(
        ln.startswith(("export CUDA_VISIBLE_DEVICES", "#SBATCH --chdir")) for ln in lines
    )
    step = next(ln for ln in lines if ln.startswith("srun --nodes"))
    assert (
        step.endswith(f"--tee 3 {ddp_digits} --epochs 2 --name 'a b'")
        and "--nproc-per-node 2" in step
    )
    # not the script's
    assert f"--chdir={REPO_ROOT}" in next(
        ln for ln in lines if "lab.engine.slurm.node_sampler" in ln
    )
    assert (
        subprocess.run(["bash", "-n"], input=p.sbatch, text=True, capture_output=True).returncode
        == 0
    )
    assert backends.build_command(c, run_dir, 0, base_env={"B": "2"}) == (p.argv, {"B": "2"})
    assert c.world_size == 2 and dataclasses.replace(c, mode="dp").world_size == 2
    single = dataclasses.replace(c, mode="single", nproc=1)
    assert [(e.field, e.message[:40]) for e in script.problems(single, 8)] == [
        ("gpus_per_node", "single mode uses one device, 2 GPUs per ")
    ]
    local = dataclasses.replace(c, backend="local")
    # a Slurm job's options
    assert {e.field for e in script.problems(local, 8)} == {"partition", "gpus_per_node"}
    assert "give a working directory every node sees" in slurm.workdir_local("/tmp/mine")


@pytest.mark.proc
def test_launch_script_backend_slurm_on_the_command_line(runs_dir):
    def lab(*args):
        return subprocess.run(
            [sys.executable, "-m", "lab", *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )

    out = lab(
        "launch",
        "--script",
        "examples/ddp_digits.py",
        "--backend",
        "slurm",
        "--mode",
        "ddp",
        "--time",
        "30",
        "--dry-run",
        "--",
        "--epochs",
        "1",
    )
    assert out.returncode == 0, out.stderr
    # the script's folder
    assert "#SBATCH --time=30" in out.stdout and f"\ncd {REPO_ROOT / 'examples'}\n" in out.stdout
    assert out.stdout.rstrip().endswith(
        "--parsable " + shlex.quote(str(runs_dir / "<run-id>" / "job.sbatch"))
    )
    bad = lab(
        "launch",
        "--script",
        "examples/ddp_digits.py",
        "--backend",
        "slurm",
        "--sbatch-arg=--chdir=/x",
    )
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "error: sbatch-arg: --chdir is written by the lab: the lab sets it (the run folder "
        "depends on it): leave it out"
    )
    bad = lab("launch", "--script", "examples/ddp_digits.py", "--time", "30")
    assert (
        bad.returncode == 2
        and "error: time: time is an option of a Slurm job: add backend slurm" in bad.stderr
    )
    assert not list(runs_dir.iterdir())


@pytest.mark.proc
def test_the_test_clusters_daemons_end_even_when_cancelling_its_jobs_raises(tmp_path, monkeypatch):
    """A teardown that failed in a way not foreseen once left slurmctld, slurmd and munged running
    after the suite: ``Cluster.stop`` ends the daemons whatever cancelling the jobs raised. A real
    ``sleep`` stands for a daemon; ``run`` (scancel) raises what ``stop`` does not catch."""
    root = tmp_path / "cluster"
    root.mkdir()
    daemon = subprocess.Popen(["sleep", "60"])
    try:
        cluster = Cluster(root=root, conf=root / "slurm.conf", daemons=[daemon])

        def refused(*argv, timeout=30):
            raise RuntimeError("refused")

        monkeypatch.setattr(cluster, "run", refused)
        with pytest.raises(RuntimeError, match="refused"):
            cluster.stop()
        assert daemon.poll() is not None
        assert not root.exists()
    finally:
        daemon.kill()
        daemon.wait()
