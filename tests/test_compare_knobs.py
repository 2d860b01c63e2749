"""Compare over knobs and weak sweeps (issue 33): a weak device-count sweep keeps its scaling
curve, and every option that changes speed is a fairness warning unless the sweep varied it.

Built from hand-made finished run folders (run.json, status.json, summary.json as the trainer and
supervisor write them); no process is started.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lab.engine import registry
from lab.views.compare import runs as compare_runs
from lab.views.compare import scaling_chart
from lab.views.compare.comparison import compare
from lab.views.compare.headline import warning_summary

AT = "2026-12-03T08:{:02d}:00+00:00"


def _run(
    root: Path,
    run_id: str,
    throughput: float,
    *,
    mode: str = "single",
    nproc: int = 1,
    per_device: int = 64,
    scaling: str = "strong",
    sweep_id: str | None = "sweep-1",
    minute: int = 0,
    varied: dict | None = None,
    **knobs: object,
) -> None:
    """A finished trainer run on the CPU with its steady throughput (a ±2% interval) and knobs
    (trainer config keys: precision, accum_steps, ...)."""
    d = root / run_id
    d.mkdir(parents=True)
    world = nproc if mode in ("ddp", "fsdp") else 1
    batch = per_device * world if scaling == "weak" else per_device
    config = {"mode": mode, "model": "tinycnn", "dataset": "digits", "batch_size": batch}
    config.update({"seed": 0, **knobs})
    config.update({"nproc": nproc, "nnodes": 1} if mode in ("ddp", "fsdp") else {})
    meta = {"run_id": run_id, "name": run_id, "config": config, "created_at": AT.format(minute)}
    meta.update({"host": "box", "sweep_id": sweep_id, "scaling": scaling, "varied": varied})
    (d / "run.json").write_text(json.dumps(meta))
    (d / "status.json").write_text(json.dumps({"state": "succeeded"}))
    summary = {
        "config": config,
        "mode": mode,
        "effective_mode": mode,
        "world_size": world,
        "devices": [f"cpu{i}" for i in range(world)],
        "global_batch": batch,
        "per_device_batch": batch // world,
        "steps": 200,
        "steady_throughput_samples_per_sec": throughput,
        "throughput": {
            "median": throughput,
            "ci_low": throughput * 0.98,
            "ci_high": throughput * 1.02,
            "windows": 40,
        },
        "peak_mem_mib": {f"cpu{i}": 100.0 for i in range(world)},
        "final": {"train_loss": 0.3},
        "hostname": "box",
        "completed": True,
    }
    (d / "summary.json").write_text(json.dumps(summary))


def _compare(root: Path):
    records = compare_runs.comparable(registry.list_runs(root))
    return compare([compare_runs.from_record(r) for r in records])


def test_a_weak_device_count_sweep_has_speedup_and_efficiency(tmp_path):
    """sweep --modes single,ddp --devices 1,2 --scaling weak: single x1, ddp x1, ddp x2, each
    with 64 samples per device; the curve's speedups are against the single (weak) run."""
    _run(tmp_path, "w-singlex1", 1000.0, scaling="weak", minute=0)
    _run(tmp_path, "w-ddpx1", 950.0, mode="ddp", nproc=1, scaling="weak", minute=1)
    _run(tmp_path, "w-ddpx2", 1600.0, mode="ddp", nproc=2, scaling="weak", minute=2)
    curve = {(p["mode"], p["devices"]): p for p in _compare(tmp_path).scaling_curve}
    assert set(curve) == {("single (weak)", 1), ("ddp (weak)", 1), ("ddp (weak)", 2)}
    two = curve[("ddp (weak)", 2)]
    assert two["speedup"]["value"] == pytest.approx(1.6)
    assert two["efficiency"]["value"] == pytest.approx(0.8)
    assert curve[("single (weak)", 1)]["speedup"]["value"] == pytest.approx(1.0)
    # the chart's ideal line starts from the same baseline (CPU runs: the line says what it assumes)
    fig = scaling_chart.throughput_figure(list(curve.values()))
    ideal = [t for t in fig.data if t.name == scaling_chart.IDEAL_CPU]
    assert len(ideal) == 1 and list(ideal[0].y) == [1000.0, 2000.0]


@pytest.mark.parametrize(
    "knobs,key,text",
    [
        ({"precision": "bf16"}, "amp", ("precision (", "fp32: one", "bf16: two")),
        ({"accum_steps": 4}, "accum_steps", ("accumulation steps (", "1: one", "4: two")),
        (
            {"channels_last": True},
            "channels_last",
            ("memory format (channels last)", "False: one", "True: two"),
        ),
        (
            {"bucket_cap_mb": 100.0},
            "bucket_cap_mb",
            ("DDP bucket size (MB)", "25.0: one", "100.0: two"),
        ),
        ({"grad_as_bucket_view": True}, "grad_as_bucket_view", ("gradients as bucket views",)),
        ({"static_graph": True}, "static_graph", ("DDP's static graph",)),
        ({"find_unused_parameters": True}, "find_unused_parameters", ("find unused parameters",)),
        ({"nccl_preset": "ring"}, "nccl_preset", ("NCCL preset (", "none: one", "ring: two")),
    ],
)
def test_every_option_that_changes_speed_is_a_fairness_warning(tmp_path, knobs, key, text):
    """Two ddp x2 runs, alike but for one option: one warning naming it and both values."""
    _run(tmp_path, "one", 1000.0, mode="ddp", nproc=2, sweep_id=None, minute=0)
    _run(tmp_path, "two", 1200.0, mode="ddp", nproc=2, sweep_id=None, minute=1, **knobs)
    warns = list(_compare(tmp_path).warnings)
    assert [w.key for w in warns] == [key], warns
    assert all(t in warns[0].message for t in text), warns[0].message
    counted = {"accum_steps": "1 accumulation differs", "static_graph": "1 DDP options differ"}
    if key in counted:  # the count of notes in the option's declared words
        assert warning_summary(warns) == f"1 note: {counted[key]}"


def test_default_values_given_or_not_are_alike_and_ddp_options_stay_among_ddp_runs(tmp_path):
    """accum 1 given vs not, bucket 0 (DDP's 25) vs 25, and a single run without DDP's options
    against ddp runs with a bucket size: no warning."""
    _run(tmp_path, "s", 1000.0, sweep_id=None, minute=0)
    _run(tmp_path, "d1", 1500.0, mode="ddp", nproc=2, sweep_id=None, minute=1, bucket_cap_mb=0)
    _run(tmp_path, "d2", 1500.0, mode="ddp", nproc=2, sweep_id=None, minute=2, bucket_cap_mb=25.0)
    _run(tmp_path, "d3", 1500.0, mode="ddp", nproc=2, sweep_id=None, minute=3, accum_steps=1)
    assert [w.key for w in _compare(tmp_path).warnings] == []


def test_a_sweep_varying_precision_or_accumulation_is_not_warned_about(tmp_path):
    _run(tmp_path, "v-fp32", 1000.0, minute=0, varied={"precision": "fp32"})
    _run(tmp_path, "v-bf16", 1300.0, minute=1, varied={"precision": "bf16"}, precision="bf16")
    _run(tmp_path, "v-a1", 1000.0, sweep_id="sweep-2", minute=2, varied={"accum-steps": 1})
    _run(
        tmp_path,
        "v-a4",
        900.0,
        sweep_id="sweep-2",
        minute=3,
        varied={"accum-steps": 4},
        accum_steps=4,
    )
    assert [w.key for w in _compare(tmp_path).warnings] == []


def _summary_add(root: Path, run_id: str, **extra: object) -> None:
    p = root / run_id / "summary.json"
    p.write_text(json.dumps({**json.loads(p.read_text()), **extra}))


def test_batchnorm_over_different_batches_is_not_the_same_training(tmp_path):
    """Strong scaling, a model with BatchNorm: single normalises over 64, ddp x2 over 32 per rank:
    a warning (naming --sync-bn); with sync BatchNorm both take 64 and there is none; nor without
    BatchNorm."""
    _run(tmp_path, "single", 1000.0, minute=0)
    _run(tmp_path, "ddp", 1800.0, mode="ddp", nproc=2, per_device=64, minute=1)
    assert "batchnorm" not in {w.key for w in _compare(tmp_path).warnings}
    _summary_add(tmp_path, "single", batchnorm=True)
    _summary_add(tmp_path, "ddp", batchnorm=True)
    warns = {w.key: w.message for w in _compare(tmp_path).warnings}
    assert "64: single" in warns["batchnorm"] and "32: ddp" in warns["batchnorm"]
    assert "--sync-bn" in warns["batchnorm"]
    _summary_add(tmp_path, "ddp", sync_bn=True)
    assert "batchnorm" not in {w.key for w in _compare(tmp_path).warnings}


@pytest.mark.parametrize("recorded", [True, False])
def test_half_precision_under_autocast_against_fsdps_policy_is_noted(tmp_path, recorded):
    """ddp bf16 (autocast: norms, softmax and loss in fp32) against fsdp bf16 (FSDP's policy:
    all in bf16): a note naming the precision policy, from summary.json's ``precision_policy``
    or, for summaries written before it, from the mode and precision; ddp against ddp: none."""
    _run(tmp_path, "ddp", 1000.0, mode="ddp", nproc=2, sweep_id=None, minute=0, precision="bf16")
    _run(tmp_path, "fsdp", 900.0, mode="fsdp", nproc=2, sweep_id=None, minute=1, precision="bf16")
    if recorded:
        _summary_add(tmp_path, "ddp", precision="bf16", precision_policy="autocast")
        _summary_add(tmp_path, "fsdp", precision="bf16", precision_policy="fsdp")
    warns = list(_compare(tmp_path).warnings)
    assert [w.key for w in warns] == ["precision_policy"], warns
    assert "The runs differ in precision policy (" in warns[0].message
    assert "autocast: ddp" in warns[0].message
    assert "FSDP's MixedPrecisionPolicy: fsdp" in warns[0].message
    assert "norms, softmax and loss in fp32" in warns[0].message
    assert warning_summary(warns) == "1 note: 1 precision policy differs"
    shutil.rmtree(tmp_path / "fsdp")  # the same ddp bf16 twice: one computation
    _run(tmp_path, "ddp2", 1010.0, mode="ddp", nproc=2, sweep_id=None, minute=1, precision="bf16")
    assert [w.key for w in _compare(tmp_path).warnings] == []


def test_fp32_against_half_precision_is_the_precision_note_alone(tmp_path):
    _run(tmp_path, "ddp", 1000.0, mode="ddp", nproc=2, sweep_id=None, minute=0)
    _run(tmp_path, "fsdp", 900.0, mode="fsdp", nproc=2, sweep_id=None, minute=1, precision="bf16")
    assert [w.key for w in _compare(tmp_path).warnings] == ["amp"]
