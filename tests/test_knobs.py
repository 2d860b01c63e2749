"""The performance knobs for real: gradient accumulation under DDP, bf16 on the CPU, what run.json
records, and the trainer's argv the form's declarations give.

The accumulation test runs two real trainers on the CPU: one process with no accumulation, and two
gloo ranks under torchrun with ``--accum-steps 2`` (micro-batches of 16 per rank), both with the
global batch 64. The optimizer steps must be the same, step for step (``train/loss`` within 1e-4
relative over 10 steps), and the profiled steps' all-reduces must carry the model's gradients
once per optimizer step, not once per micro-batch: the proof that the first micro-batch ran inside
``no_sync()`` (without it each step would all-reduce twice the gradient bytes).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lab.engine.launch import form, launcher
from lab.engine.launch.config import problems
from lab.engine.spec import nccl
from lab.engine.spec.run import RunConfig
from tests.helpers.train_ddp import SAME, losses, torchrun

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}


def _run(cmd: list[str], timeout: float = 240) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a hung torchrun ends with its workers
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.fixture(scope="module")
def accum_runs(tmp_path_factory, single_same) -> dict[str, Path]:
    """The single run without accumulation (the session's), and the 2-rank DDP run with
    --accum-steps 2."""
    root = tmp_path_factory.mktemp("accum")
    ddp = _run(torchrun("ddp", root / "ddp", "--accum-steps", "2", "--profile-steps", "3:6", *SAME))
    assert ddp.returncode == 0, ddp.stdout + ddp.stderr
    return {"single": single_same, "ddp": root / "ddp"}


@pytest.mark.proc
def test_ddp_accumulation_reproduces_the_single_run_step_for_step(accum_runs):
    single, ddp = losses(accum_runs["single"]), losses(accum_runs["ddp"])
    assert sorted(single) == sorted(ddp) == list(range(1, 11))
    for step in range(1, 11):
        assert abs(ddp[step] - single[step]) <= 1e-4 * abs(single[step]), (step, single, ddp)
    summary = json.loads((accum_runs["ddp"] / "summary.json").read_text())
    assert (summary["global_batch"], summary["per_device_batch"], summary["micro_batch"]) == (
        64,
        32,
        16,
    )
    assert summary["accum_steps"] == summary["config"]["accum_steps"] == 2
    assert summary["precision"] == "fp32" and summary["amp"] is False


@pytest.mark.proc
def test_ddp_accumulation_all_reduces_the_gradients_once_per_step(accum_runs):
    """no_sync(): the profiled steps' all-reduces carry the gradient bytes once per optimizer step
    (tinycnn fits one bucket; the trainer's own reductions of a few floats ride along), where two
    synchronised micro-batches would carry them twice."""
    from training import data, models

    b = json.loads((accum_runs["ddp"] / "profile" / "breakdown.json").read_text())
    bundle = data.load("digits", 16)
    model = models.build("tinycnn", bundle.channels, bundle.num_classes)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    assert grad_bytes > 4096  # so that twice the gradients could not pass for once plus extras
    reduces = [c for c in b["collectives"] if c["op"] == "all_reduce"]
    assert sorted(c["rank"] for c in reduces) == [0, 1], b["collectives"]
    for c in reduces:
        assert grad_bytes <= c["bytes"] <= grad_bytes + 4096, (c, grad_bytes)


@pytest.mark.proc
def test_bf16_runs_on_the_cpu_and_records_its_precision(tmp_path):
    run = tmp_path / "bf16"
    res = _run(
        [
            sys.executable,
            "-m",
            "training.train",
            "--log-dir",
            str(run),
            "--precision",
            "bf16",
            "--channels-last",
            "--max-steps",
            "3",
            "--image-size",
            "16",
        ],
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["precision"], summary["amp_dtype"], summary["amp"]) == (
        "bf16",
        "bfloat16",
        True,
    )
    assert summary["config"]["precision"] == "bf16" and summary["config"]["channels_last"] is True
    assert summary["steps"] == 3 and summary["final"]["train_loss"] is not None
    # what "fp32" meant and the NCCL this torch carries (additive keys)
    assert set(summary["tf32"]) == {"matmul", "cudnn"} and "nccl_env" in summary
    assert "nccl_version" in summary


# the trainer's refusals of the knobs, in-process (tests/test_train_cli.py runs one as a process)
REFUSED = {
    "grad_as_bucket_view_without_ddp": (
        ["--mode", "dp", "--grad-as-bucket-view"],
        "--grad-as-bucket-view is an option of DistributedDataParallel and --mode dp has none",
    ),
    "static_graph_without_ddp": (["--static-graph"], "use --mode ddp or leave it out"),
    "find_unused_without_ddp": (["--find-unused-parameters"], "--find-unused-parameters is"),
    "bucket_cap_zero": (["--mode", "ddp", "--bucket-cap-mb", "0"], "must be above 0"),
    "accum_zero": (["--accum-steps", "0"], "--accum-steps must be 1 (none) to 1024"),
    "accum_not_dividing": (["--accum-steps", "3"], "does not divide the batch of 64 per step"),
    "static_graph_with_accum": (
        ["--mode", "ddp", "--static-graph", "--accum-steps", "2"],
        "--static-graph does not work with --accum-steps 2",
    ),
    "amp_and_precision": (["--amp", "--precision", "bf16"], "give one of them, not both"),
    "unknown_precision": (["--precision", "fp8"], "invalid choice: 'fp8'"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_the_trainer_refuses_a_knob_in_one_line(name, tmp_path, monkeypatch, capfd):
    from training.train import main

    argv, text = REFUSED[name]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    for k, v in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(k, v)
    run = tmp_path / "run"
    before = signal.getsignal(signal.SIGTERM)
    try:
        code = main(["--log-dir", str(run), "--image-size", "8", "--max-steps", "2", *argv])
    finally:
        signal.signal(signal.SIGTERM, before)  # main's own handler is for the trainer's process
    err = capfd.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and text in err[0], err
    assert not run.exists()


def test_the_knobs_reach_the_trainer_only_when_set():
    assert form.trainer_flags(RunConfig()) == []
    c = RunConfig(
        mode="ddp",
        nproc=2,
        precision="bf16",
        accum_steps=4,
        channels_last=True,
        bucket_cap_mb=1,
        grad_as_bucket_view=True,
        find_unused_parameters=True,
        nccl_preset="ring",
    )
    assert problems(c, 0) == []
    assert form.trainer_flags(c)[2:4] == ["--accum-steps", "4"]
    # static graph with accumulation is refused (test_engine_cli), so it goes in at 1 step
    c = dataclasses.replace(c, accum_steps=1, static_graph=True)
    assert problems(c, 0) == []
    assert form.trainer_flags(c) == [
        "--precision",
        "bf16",
        "--channels-last",
        "--bucket-cap-mb",
        "1.0",
        "--grad-as-bucket-view",
        "--static-graph",
        "--find-unused-parameters",
    ]
    assert all(f.name in form.BY_NAME for f in form.knobs.FIELDS)
    section = dict((t, rows) for t, rows in form.LAYOUT if t)["Performance knobs"]
    placed = {
        n for row in section for col in row for n in ((col,) if isinstance(col, str) else col)
    }
    assert placed == {f.name for f in form.knobs.FIELDS}


def test_an_nccl_preset_lands_in_the_environment_and_run_json(tmp_path):
    c = RunConfig(mode="ddp", nproc=2, nccl_preset="debug", extra_env={"NCCL_DEBUG": "WARN"})
    run_id = launcher.new_run(c, tmp_path, None, "test box")
    record = json.loads((tmp_path / run_id / "run.json").read_text())
    assert record["config"]["nccl_preset"] == "debug"
    # the preset's variables, the user's own --env winning a clash
    assert (
        record["env"]["NCCL_DEBUG_SUBSYS"] == "INIT,ENV,GRAPH,TUNING"
        and record["env"]["NCCL_DEBUG"] == "WARN"
    )
    assert nccl.preset_env("no-infiniband") == {"NCCL_IB_DISABLE": "1"}
    assert nccl.preset_env("") == {}


def test_the_preflight_says_a_preset_does_nothing_under_gloo():
    from lab.engine.devices.nvml import DeviceSnapshot
    from lab.engine.preflight.checks import MachineFacts, preflight

    snap = DeviceSnapshot(gpus=(), cpu=None, reason="none", taken_at=0.0)
    cpu = preflight(RunConfig(mode="ddp", nproc=2, nccl_preset="ring"), snap, MachineFacts())
    assert any("NCCL preset ring (NCCL_ALGO=Ring) has no effect here" in line for line in cpu), cpu
    gpu = preflight(
        RunConfig(mode="ddp", gpus=(0, 1), nproc=2, nccl_preset="ring"), snap, MachineFacts()
    )
    assert any("a starting point from the seeds" in line for line in gpu), gpu


def test_the_memory_estimate_counts_a_micro_batch_and_autocast():
    from lab.engine.preflight import estimate

    def at(**kw):
        return estimate.per_gpu(RunConfig(gpus=(0,), batch_size=64, **kw))[0]

    assert at(accum_steps=2).batch == 32 and at().batch == 64
    assert at(accum_steps=2).activations_mib < at().activations_mib
    assert at(precision="bf16") == at(amp=True) != at()


def test_each_trainer_option_is_one_entry_read_by_the_trainer_the_form_and_the_cli():
    """``training.options.KNOBS`` is the one declaration: the trainer's parser, the Launch form,
    ``lab launch``'s flags and ``--vary`` each show every entry with its flag, choices, default
    and words, and every form field that hands the trainer a flag comes from an entry."""
    import argparse

    from lab.cli.run_options import add_run_options
    from lab.engine.sweep import vary
    from training.cli import build_parser
    from training.options import KNOBS

    trainer = {s: a for a in build_parser()._actions for s in a.option_strings}
    lab = argparse.ArgumentParser()
    add_run_options(lab)
    lab_flags = {s: a for a in lab._actions for s in a.option_strings}
    config = {f.name: f for f in dataclasses.fields(RunConfig)}
    assert len(KNOBS) >= 12
    for o in KNOBS:
        t = trainer[o.flag]
        assert (t.dest, t.help) == (o.name, o.help), o.name
        if o.kind == "select":
            assert (tuple(t.choices), t.default) == (o.choices, o.default), o.name
        field = form.BY_NAME[o.name]
        assert (field.trainer_flag, field.options, field.option_labels) == (
            o.flag,
            o.choices,
            o.choice_labels,
        )
        assert (field.label, field.help, field.differs) == (o.label, o.form_help, o.differs)
        assert lab_flags[o.flag].help.startswith(o.help.replace("%", "%%")), o.name
        assert o.name in config, f"{o.name}: RunConfig has no field for it"
        if o.name != "memory_snapshot":  # a diagnosis, not a knob to compare
            assert vary.VARIABLE[o.flag[2:]] == o.name
    assert {f.name for f in form.knobs.FIELDS if f.trainer_flag} == {o.name for o in KNOBS}
