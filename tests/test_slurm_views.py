"""A Slurm run on the pages, without a cluster: lab/views/live/nodes.py (the job in words, charts
per node), the Launch page with "Where to run: slurm" (its fields, the job script shown; for the
trainer and for My script) and the Live page of a Slurm run folder (its job, why it waits, each
node's samples, written by the real node sampler)."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import numpy as np
from streamlit.testing.v1 import AppTest

from lab.engine import procs
from lab.engine.slurm.node_sampler import NodeSampler
from lab.engine.spec.run import RunConfig
from lab.runfolder import REPO_ROOT, RUN_JSON, STATUS_JSON, now_iso, write_json_atomic
from lab.views.live import nodes
from lab.views.text import md_escape


def series(values, t0=100.0):
    n = len(values)
    return SimpleNamespace(
        step=np.arange(n),
        wall_time=t0 + np.arange(n, dtype=float),
        value=np.asarray(values, dtype=float),
    )


def test_job_lines_say_the_job_and_why_it_waits():
    rec = SimpleNamespace(
        slurm={"job_id": "12", "state": "PENDING", "reason": "PartitionTimeLimit", "nodes": ""}
    )
    assert nodes.job_lines(rec) == [
        "Slurm job 12: PENDING",
        "Waiting: it will not start as asked: the time asked is "
        "over the partition's MaxTime: ask for less time (scontrol show partition shows "
        "MaxTime) (PartitionTimeLimit); stop it and launch again",
    ]
    running = SimpleNamespace(
        slurm={"job_id": "12", "state": "RUNNING", "reason": "", "nodes": "gpu[01-02]"}
    )
    assert nodes.job_lines(running) == ["Slurm job 12: RUNNING on gpu[01-02]"]
    assert (
        nodes.job_lines(SimpleNamespace(slurm=None)) == []
        and nodes.job_lines(SimpleNamespace()) == []
    )


def test_node_charts_one_set_per_node_gpus_then_host():
    sysd = {
        "sys/node1/gpu0/util_pct": series([10, 20], 105.0),
        "sys/node1/gpu1/util_pct": series([30, 40], 105.0),
        "sys/node1/host_cpu_pct": series([50, 60], 105.0),
        "sys/node0/host_cpu_pct": series([1, 2, 3]),
        # a local run's
        "sys/node0/host_mem_used_mib": series([500, 510, 520]),
        "sys/cpu_pct": series([9]),
        "sys/node2/host_cpu_pct": series([]),
    }  # no point yet: no node yet
    out = nodes.node_charts(sysd)
    assert [label for label, _ in out] == ["node 0", "node 1"]
    assert [s.title for s in out[0][1]] == [
        "Node CPU use (all its processes)",
        "Node memory used (all its processes)",
    ]
    assert [s.title for s in out[1][1]] == ["GPU utilisation", "Node CPU use (all its processes)"]
    gpu = out[1][1][0]
    assert [t[0] for t in gpu.traces] == ["gpu0", "gpu1"] and list(gpu.traces[1][2]) == [30, 40]
    name, x, y = out[1][1][1].traces[0]
    # seconds since the node's first
    assert name == "node 1" and list(x) == [0.0, 1.0] and list(y) == [50, 60]
    assert out[0][1][0].y_range == (0.0, 100.0)
    assert nodes.node_charts({"sys/cpu_pct": series([1])}) == []  # a local run has no nodes


def _app(page: str) -> AppTest:
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=30)
    at.run()
    at.switch_page(page)
    at.run()
    assert not at.exception, at.exception
    return at


def test_launch_page_with_slurm_shows_its_fields_and_the_job_script(runs_dir):
    at = _app("pages/1_Launch.py")
    assert at.text_input(key="launch_partition").disabled  # local: the job's options are off
    assert not at.text_input(key="launch_endpoint").disabled
    at.radio(key="launch_backend").set_value("slurm").run()
    assert (
        not at.text_input(key="launch_partition").disabled
        and at.text_input(key="launch_endpoint").disabled
    )
    at.radio(key="launch_mode").set_value("ddp").run()
    at.number_input(key="launch_gpus_per_node").set_value(4).run()
    at.text_input(key="launch_partition").set_value("gpu").run()
    at.text_area(key="launch_sbatch_args").set_value("--qos=high").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    code = "\n".join(c.value for c in at.code)
    assert (
        "sbatch \\\n  --parsable" in code
        and "#SBATCH --partition=gpu" in code
        and "#SBATCH --qos=high" in code
    )
    # one process per GPU of each node
    assert "--nproc-per-node 4" in code and "--gpus-per-node=4" in code
    assert any("4 process(es) per node" in c.value for c in at.caption)
    text = "\n".join(m.value for m in at.markdown)
    # node-local warning
    assert md_escape("Slurm job: 1 node on partition gpu") in text and "under /tmp" in text
    assert "**The command that submits it**" in text
    at.text_area(key="launch_sbatch_args").set_value("--nodes=2").run()
    assert any("--nodes is written by the lab: use nnodes instead" in e.value for e in at.error)
    assert not list(runs_dir.iterdir())


def test_my_script_with_slurm_shows_the_job_script_that_runs_it_in_its_folder(runs_dir):
    at = _app("pages/1_Launch.py")
    at.radio(key="launch_kind").set_value("script").run()
    # local first, as the trainer's form
    assert at.text_input(key="launch_script_partition").disabled
    at.radio(key="launch_script_backend").set_value("slurm").run()
    script, work = REPO_ROOT / "examples" / "ddp_digits.py", REPO_ROOT / "examples"
    at.text_input(key="launch_script_path").set_value(str(script))
    at.text_input(key="launch_script_args").set_value("--epochs 2")
    at.text_input(key="launch_script_cwd").set_value(str(work))
    at.radio(key="launch_script_mode").set_value("ddp")
    at.number_input(key="launch_script_gpus_per_node").set_value(2)
    at.text_input(key="launch_script_time").set_value("30").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.text_input(key="launch_script_endpoint").disabled  # Slurm starts every node itself
    job, submit = at.code[0].value, at.code[1].value
    assert (
        f"\ncd {work}\n" in job
        and "#SBATCH --gpus-per-node=2" in job
        and "#SBATCH --time=30" in job
    )
    assert "--nproc-per-node 2 --rdzv-backend c10d" in job and job.rstrip().endswith('exit "$rc"')
    assert f"--tee 3 {script} --epochs 2" in job and "sbatch \\\n  --parsable" in submit
    text = "\n".join(m.value for m in at.markdown)
    assert md_escape("Slurm job: 1 node on the cluster's default partition, time limit 30.") in text
    assert "**The command that submits it**" in text
    at.text_input(key="launch_script_time").set_value("2 hours").run()
    assert any("is not a Slurm time limit" in e.value for e in at.error)
    assert not list(runs_dir.iterdir())


def test_live_page_of_a_pending_slurm_run_with_node_samples(runs_dir):
    run_dir = runs_dir / "20261129-100000-ddp-slurm-0001"
    run_dir.mkdir()
    cfg = RunConfig(mode="ddp", nproc=2, nnodes=2, backend="slurm")
    write_json_atomic(
        run_dir / RUN_JSON,
        {"run_id": run_dir.name, "config": cfg.to_dict(), "created_at": now_iso()},
    )
    for node in (0, 1):  # what each node's sampler writes, by the sampler itself
        s = NodeSampler(run_dir, node, ())
        s.sample()
        time.sleep(0.05)
        s.sample()
        s.close()
    # a live status whose supervisor is this test process: the registry keeps it queued, not lost
    write_json_atomic(
        run_dir / STATUS_JSON,
        {
            "state": "queued",
            "backend": "slurm",
            "supervisor_pid": os.getpid(),
            "supervisor_ct": procs.create_time(os.getpid()),
            "updated_at": now_iso(),
            "slurm": {"job_id": "77", "state": "PENDING", "reason": "Resources", "nodes": ""},
        },
    )
    at = _app("pages/2_Live.py")
    assert at.selectbox(key="live_run").value == run_dir.name
    captions = [c.value for c in at.caption]
    assert md_escape("Slurm job 77: PENDING") in captions
    assert any(md_escape("Waiting: waiting for the nodes") in c for c in captions)
    shown = [m.value for m in at.markdown]
    assert "**Devices of node 0**" in shown and "**Devices of node 1**" in shown
    stop = at.button(key="live_stop")
    assert stop.help == "scancel of the Slurm job"
