"""lab.views.compare.scaling, and what it does to the Compare table and the fairness warnings:
strong runs get speedup / devices, weak runs throughput per device against the baseline's, runs of
neither no efficiency; the table labels each run's scaling (recorded by its sweep, else read from
the batches), and the warnings say when runs are compared across scalings, the seeds' DDP 256 per
GPU against DP 256 global included.

Run folders are written by the test in the contract's shape
(``tests.helpers.compare_runs.make_run``), with
run.json's ``scaling`` as ``sweeps.launch_sweep`` records it; the real weak sweep is
tests/test_why_faster.py's."""

from __future__ import annotations

import json

import pytest

from lab.views.compare import scaling
from lab.views.compare.comparison import compare
from lab.views.compare.figures import RunFigures
from lab.views.compare.table import frame
from tests.helpers.compare_runs import load_runs, make_run


def record(run_dir, value: str) -> None:
    meta = json.loads((run_dir / "run.json").read_text())
    meta["scaling"] = value
    (run_dir / "run.json").write_text(json.dumps(meta))


def m(global_batch, per_device):
    return RunFigures(global_batch=global_batch, per_device_batch=per_device)


def test_relation_and_efficiency_formulas():
    base = m(64, 64)
    assert scaling.relation(m(64, 32), base) == "strong"
    assert scaling.relation(m(128, 64), base) == "weak"
    assert scaling.relation(m(256, 128), base) is None
    assert scaling.relation(m(None, None), m(None, None)) is None  # unknown is not "the same"
    # speedup / devices
    assert scaling.efficiency("strong", 1800.0, 2, 1000.0, 1) == pytest.approx(0.9)
    # per device vs baseline's
    assert scaling.efficiency("weak", 3000.0, 4, 1000.0, 1) == pytest.approx(0.75)
    assert scaling.efficiency("weak", 3000.0, 4, 1600.0, 2) == pytest.approx(750 / 800)
    assert scaling.efficiency(None, 3000.0, 4, 1000.0, 1) is None
    assert scaling.efficiency("weak", None, 4, 1000.0, 1) is None
    assert scaling.label("weak", "strong") == "weak" and scaling.label(None, "strong") == "strong"
    assert scaling.label("bogus", None) is None


def test_a_weak_sweep_in_the_table(tmp_path):
    root = tmp_path / "r"
    for d in (
        make_run(
            root,
            "a-single",
            batch=64,
            throughput=1000.0,
            sweep_id="w",
            created_at="2026-11-29T07:00:00+00:00",
        ),
        make_run(
            root,
            "b-dp",
            mode="dp",
            effective_mode="single",
            devices=("cpu0",),
            batch=64,
            throughput=950.0,
            sweep_id="w",
            created_at="2026-11-29T07:01:00+00:00",
        ),
        make_run(
            root,
            "c-ddp",
            mode="ddp",
            devices=("cpu0", "cpu1"),
            batch=128,
            throughput=1600.0,
            sweep_id="w",
            created_at="2026-11-29T07:02:00+00:00",
        ),
    ):
        record(d, "weak")
    runs = load_runs(root)
    df = frame(compare(runs)).set_index("run")
    assert list(df["scaling"]) == ["weak", "weak", "weak"]
    assert df.loc["c-ddp", "efficiency"] == pytest.approx((1600 / 2) / (1000 / 1))
    assert df.loc["b-dp", "efficiency"] == pytest.approx(0.95)
    warns = list(compare(runs).warnings)
    # nothing about scalings: one sweep
    assert [w.key for w in warns] == ["global_batch", "effective_mode"]
    assert scaling.WEAK_BATCH_NOTE in warns[0].message


def test_runs_recorded_under_both_scalings_warn(tmp_path):
    root = tmp_path / "r"
    record(make_run(root, "a-single", batch=64, created_at="2026-11-29T07:00:00+00:00"), "strong")
    record(
        make_run(
            root,
            "b-ddp",
            mode="ddp",
            devices=("cpu0", "cpu1"),
            batch=64,
            created_at="2026-11-29T07:01:00+00:00",
        ),
        "strong",
    )
    record(
        make_run(
            root,
            "c-ddp-weak",
            mode="ddp",
            devices=("cpu0", "cpu1"),
            batch=128,
            created_at="2026-11-29T07:02:00+00:00",
        ),
        "weak",
    )
    runs = load_runs(root)
    msgs = [w.message for w in list(compare(runs).warnings) if w.key == "scaling"]
    assert len(msgs) == 1 and "strong: b-ddp, a-single; weak: c-ddp-weak" in msgs[0]
    df = frame(compare(runs)).set_index("run")
    assert (df.loc["b-ddp", "scaling"], df.loc["c-ddp-weak", "scaling"]) == ("strong", "weak")


def test_the_seeds_trap_without_records(tmp_path):
    """DDP at 256 per GPU (1024 global) against DP at 256 global: one run strong, one weak, said."""
    root = tmp_path / "r"
    make_run(root, "single", batch=256, created_at="2026-11-29T07:00:00+00:00")
    dp = make_run(
        root,
        "dp",
        mode="dp",
        devices=("cuda0", "cuda1", "cuda2", "cuda3"),
        batch=256,
        created_at="2026-11-29T07:01:00+00:00",
    )
    # DP splits its global batch over the 4 GPUs
    summary = json.loads((dp / "summary.json").read_text())
    (dp / "summary.json").write_text(json.dumps(dict(summary, world_size=4, per_device_batch=64)))
    make_run(
        root,
        "ddp",
        mode="ddp",
        devices=("cuda0", "cuda1", "cuda2", "cuda3"),
        batch=1024,
        created_at="2026-11-29T07:02:00+00:00",
    )
    runs = load_runs(root)
    msgs = [w.message for w in list(compare(runs, "single").warnings) if w.key == "scaling"]
    assert (
        len(msgs) == 1
        and "dp keep its global batch (strong scaling) but ddp keep only its batch per device"
        in msgs[0]
    )
    df = frame(compare(runs, "single")).set_index("run")
    assert (df.loc["dp", "scaling"], df.loc["ddp", "scaling"]) == ("strong", "weak")


def test_neither_scaling_leaves_efficiency_empty(tmp_path):
    root = tmp_path / "r"
    make_run(root, "one", batch=64, created_at="2026-11-29T07:00:00+00:00")
    make_run(
        root,
        "two",
        mode="ddp",
        devices=("cuda0", "cuda1"),
        batch=256,
        throughput=1500.0,
        created_at="2026-11-29T07:01:00+00:00",
    )
    runs = load_runs(root)
    df = frame(compare(runs)).set_index("run")
    assert df.loc["two", "speedup"] == pytest.approx(1.5) and df.isna().loc["two", "efficiency"]
    assert df.isna().loc["two", "scaling"]
    msgs = [w.message for w in list(compare(runs).warnings) if w.key == "scaling"]
    assert msgs == [
        "two share neither the global batch nor the batch per device with the baseline one: "
        "neither "
        "strong nor weak scaling efficiency applies, so its efficiency is left empty; choose a "
        "baseline "
        "from its own sweep."
    ]
