"""lab.views.compare.comparison and .table (the table's figures, exact; the baseline; the columns
and their formats; CSV), lab.views.compare.runs (the registry's records wrapped, the default
selection, labels, provenance) and lab.views.compare.fairness (the warnings).

Run folders here are written by the test (run.json, status.json and
summary.json in the contract's shape) so that every expected number is known
exactly.
"""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from lab.engine import registry
from lab.views.compare import comparison, figures, speed, table
from lab.views.compare import runs as compare_runs
from lab.views.compare.comparison import compare
from lab.views.compare.table import frame
from tests.helpers.compare_runs import available_runs, load_run, load_runs, make_run


@pytest.fixture
def trio(tmp_path):
    root = tmp_path / "runs"
    make_run(
        root,
        "a-single",
        mode="single",
        throughput=1000.0,
        peaks={"cuda0": 400.0},
        created_at="2026-11-29T07:00:00+00:00",
        sweep_id="s1",
    )
    make_run(
        root,
        "b-dp",
        mode="dp",
        devices=("cuda0", "cuda1"),
        throughput=1500.0,
        peaks={"cuda0": 900.0, "cuda1": 500.0},
        created_at="2026-11-29T07:01:00+00:00",
        sweep_id="s1",
    )
    make_run(
        root,
        "c-ddp",
        mode="ddp",
        devices=("cuda0", "cuda1"),
        throughput=1800.0,
        peaks={"cuda0": 600.0, "cuda1": 600.0},
        created_at="2026-11-29T07:02:00+00:00",
        sweep_id="s1",
    )
    return load_runs(root)


def test_table_figures_are_exact(trio):
    df = frame(compare(trio)).set_index("run")
    assert list(df.index) == ["c-ddp", "b-dp", "a-single"]  # newest first, as loaded
    assert df.loc["a-single", "speedup"] == pytest.approx(1.0)
    assert df.loc["b-dp", "speedup"] == pytest.approx(1.5)
    assert df.loc["c-ddp", "speedup"] == pytest.approx(1.8)
    assert df.loc["b-dp", "efficiency"] == pytest.approx(0.75)
    assert df.loc["c-ddp", "efficiency"] == pytest.approx(0.9)
    assert df.loc["b-dp", "memory imbalance"] == pytest.approx((900 - 500) / 700)
    assert df.loc["c-ddp", "memory imbalance"] == pytest.approx(0.0)
    assert pd.isna(df.loc["a-single", "memory imbalance"])  # one device: no imbalance to speak of
    assert (
        df.loc["b-dp", "peak MiB cuda0"] == 900.0 and df.loc["a-single", "peak MiB cuda0"] == 400.0
    )
    assert pd.isna(df.loc["a-single", "peak MiB cuda1"])
    assert df.loc["c-ddp", "world size"] == 2 and df.loc["c-ddp", "per-device batch"] == 32
    assert df.loc["c-ddp", "epoch time (s)"] == pytest.approx(6400 / 1800)
    assert df.loc["a-single", "final val acc"] == 0.875
    assert df.loc["b-dp", "devices"] == "cuda0, cuda1"
    # one global batch, no scaling recorded: read from the batches
    assert list(df["scaling"]) == ["strong"] * 3


def test_baseline_choice(trio):
    assert comparison.choose_baseline(trio) == "a-single"
    df = frame(compare(trio, baseline_key="c-ddp")).set_index("run")
    assert df.loc["c-ddp", "speedup"] == pytest.approx(1.0)
    assert df.loc["c-ddp", "efficiency"] == pytest.approx(1.0)  # relative to its own 2 devices
    assert df.loc["a-single", "speedup"] == pytest.approx(1000 / 1800)
    assert df.loc["a-single", "efficiency"] == pytest.approx((1000 / 1800) / (1 / 2))
    # An unknown baseline falls back to the default rather than failing.
    assert (
        frame(compare(trio, baseline_key="nope")).set_index("run").loc["a-single", "speedup"] == 1.0
    )


def test_baseline_skips_dp_that_fell_back(tmp_path):
    root = tmp_path / "r"
    make_run(
        root,
        "dp",
        mode="dp",
        effective_mode="single",
        devices=("cpu0",),
        throughput=900.0,
        created_at="2026-11-29T07:00:00+00:00",
    )
    make_run(
        root,
        "one",
        mode="single",
        devices=("cpu0",),
        throughput=1000.0,
        created_at="2026-11-29T07:01:00+00:00",
    )
    assert comparison.choose_baseline(load_runs(root)) == "one"


def test_baseline_is_the_median_repeat_of_the_single_runs(tmp_path):
    root = tmp_path / "r"
    for i, tp in enumerate((1300.0, 1000.0, 900.0)):  # three repeats: 900 < 1000 < 1300
        make_run(
            root,
            f"s{i}",
            mode="single",
            devices=("cpu0",),
            throughput=tp,
            created_at=f"2026-11-29T07:0{i}:00+00:00",
            sweep_id="sweep-r",  # repeats are a sweep's
        )
    make_run(root, "ddp", mode="ddp", devices=("cpu0", "cpu1"), throughput=1500.0)
    runs = load_runs(root)
    assert comparison.choose_baseline(runs) == "s1"  # the median, not the first or the fastest
    assert comparison.choose_baseline([r for r in runs if r.key != "s2"]) == "s0"  # two: first


def test_formulas_edge_cases():
    assert speed.speedup(None, 10) is None and speed.speedup(10, 0) is None
    assert figures.imbalance({"a": 100.0}) is None
    assert figures.imbalance({"a": 300.0, "b": 100.0}) == pytest.approx(1.0)
    assert figures.imbalance({"a": 0.0, "b": 0.0}) is None


def test_no_warnings_for_a_fair_sweep(trio):
    assert list(compare(trio).warnings) == []


@pytest.mark.parametrize(
    "field,kw,key",
    [
        ("model", {"model": "resnet18"}, "model"),
        ("dataset", {"dataset": "synthetic"}, "dataset"),
        ("batch", {"batch": 128}, "global_batch"),
        ("seed", {"seed": 7}, "seed"),
        ("amp", {"amp": True}, "amp"),
        ("host", {"host": "other"}, "host"),
    ],
)
def test_each_mismatch_warns(tmp_path, field, kw, key):
    root = tmp_path / "r"
    make_run(root, "one", created_at="2026-11-29T07:00:00+00:00")
    make_run(
        root,
        "two",
        mode="ddp",
        devices=("cuda0", "cuda1"),
        created_at="2026-11-29T07:01:00+00:00",
        **kw,
    )
    warns = list(compare(load_runs(root)).warnings)
    assert [w.key for w in warns] == [key]
    # each value with the runs that have it: "(<value>: two; <value>: one)"
    assert ": one" in warns[0].message and ": two" in warns[0].message


def test_device_count_and_fallback_warnings(tmp_path):
    root = tmp_path / "r"
    make_run(
        root, "ddp2", mode="ddp", devices=("cuda0", "cuda1"), created_at="2026-11-29T07:00:00+00:00"
    )
    make_run(
        root,
        "ddp4",
        mode="ddp",
        devices=("cuda0", "cuda1", "cuda2", "cuda3"),
        created_at="2026-11-29T07:01:00+00:00",
    )
    make_run(
        root,
        "dp",
        mode="dp",
        effective_mode="single",
        devices=("cuda0",),
        reason="DataParallel needs at least two GPUs; 1 visible",
        created_at="2026-11-29T07:02:00+00:00",
    )
    warns = list(compare(load_runs(root)).warnings)
    keys = [w.key for w in warns]
    assert keys.count("device_count") == 1 and keys.count("effective_mode") == 1
    msg = next(w.message for w in warns if w.key == "effective_mode")
    assert "dp was asked to run as dp but ran as single" in msg and "1 visible" in msg
    # dp (fell back to one device) vs ddp4: the device count differs by design, no warning.
    assert "device_count" not in [w.key for w in list(compare(load_runs(root)[:2]).warnings)]


def test_unfinished_run_warns_and_uses_events(tmp_path):
    root = tmp_path / "r"
    make_run(root, "done", created_at="2026-11-29T07:00:00+00:00")
    make_run(root, "half", summary=False, created_at="2026-11-29T07:01:00+00:00")
    runs = load_runs(root)
    assert [w.key for w in list(compare(runs).warnings)] == ["no_summary"]

    class S:  # the shape of lab.events.Series
        def __init__(self, v):
            import numpy as np

            self.value = np.asarray(v, dtype=float)
            self.step = np.arange(len(v)) * 10.0
            self.wall_time = 100.0 + self.step

    scalars = {
        "half": {
            "perf/samples_per_sec": S([10.0, 2000.0, 1000.0]),
            "mem/cuda0/peak_mib": S([100.0, 300.0, 200.0]),
            "train/loss": S([2.0, 1.0, 0.5]),
        }
    }
    df = frame(compare(runs, scalars=scalars)).set_index("run")
    # first window excluded
    assert df.loc["half", "throughput (samples/s)"] == pytest.approx(1500.0)
    assert df.loc["half", "speedup"] == pytest.approx(1.5)
    assert df.loc["half", "peak MiB cuda0"] == 300.0
    assert df.loc["half", "final train loss"] == 0.5


def test_default_selection(tmp_path):
    user, sample = tmp_path / "u", tmp_path / "s"
    make_run(sample, "s-single", created_at="2026-01-01T00:00:00+00:00")
    make_run(
        sample,
        "s-ddp",
        mode="ddp",
        devices=("cpu0", "cpu1"),
        created_at="2026-01-01T00:01:00+00:00",
    )
    # Fresh install: the sample runs, sample keys prefixed.
    assert compare_runs.default_selection(available_runs(user, sample)) == [
        "sample/s-single",
        "sample/s-ddp",
    ]
    make_run(user, "old1", sweep_id="sw-old", created_at="2026-11-29T06:00:00+00:00")
    make_run(user, "new1", sweep_id="sw-new", created_at="2026-11-29T07:00:00+00:00")
    make_run(user, "new2", sweep_id="sw-new", created_at="2026-11-29T07:00:05+00:00")
    make_run(user, "loose", created_at="2026-11-29T08:00:00+00:00")
    assert compare_runs.default_selection(available_runs(user, sample)) == [
        "new1",
        "new2",
    ]


def test_default_selection_of_the_samples_is_their_newest_sweep(tmp_path):
    # The shipped folder holds two sample sweeps: the newest is shown whole, never mixed with the
    # other's last runs (the newest 10 of 19 would be 9 of one sweep and 1 of the other).
    user, sample = tmp_path / "u", tmp_path / "s"
    for i in range(10):
        make_run(sample, f"m{i}", sweep_id="sw-modes", created_at=f"2026-01-01T00:{i:02d}:00+00:00")
    for i in range(9):
        make_run(sample, f"c{i}", sweep_id="sw-count", created_at=f"2026-02-01T00:{i:02d}:00+00:00")
    runs = available_runs(user, sample)
    assert compare_runs.default_selection(runs) == [f"sample/c{i}" for i in range(9)]


def test_default_selection_without_sweeps(tmp_path):
    user = tmp_path / "u"
    for i in range(12):
        make_run(user, f"r{i:02d}", created_at=f"2026-11-29T07:{i:02d}:00+00:00")
    # no sweep: the newest 10 runs, oldest first
    assert compare_runs.default_selection(load_runs(user)) == [f"r{i:02d}" for i in range(2, 12)]


def test_labels_are_unique(tmp_path):
    make_run(tmp_path / "u", "x")
    make_run(tmp_path / "s", "x")
    runs = available_runs(tmp_path / "u", tmp_path / "s")
    assert sorted(compare_runs.labels(runs).values()) == ["sample: x", "x"]


def test_csv_columns_and_values(trio):
    df = frame(compare(trio))
    back = pd.read_csv(io.BytesIO(table.table_csv(df)))
    assert list(back.columns) == (
        table.COLUMNS_BEFORE_DEVICES
        + ["peak MiB cuda0", "peak MiB cuda1"]
        + table.COLUMNS_AFTER_DEVICES
        + table.COLUMNS_WHY  # no sys/ samples here: no "util % gpu<i>" columns
    )
    assert back["speedup"].tolist() == pytest.approx([1.8, 1.5, 1.0])


def test_broken_and_foreign_folders_are_skipped(tmp_path):
    root = tmp_path / "r"
    make_run(root, "ok")
    (root / "junk").mkdir()
    (root / "bad").mkdir()
    (root / "bad" / "run.json").write_text("{not json")
    assert [r.run_id for r in load_runs(root)] == ["ok"]
    assert load_runs(tmp_path / "missing") == []


def test_sample_labels_and_provenance(tmp_path):
    make_run(tmp_path / "s", "sample-ddp", host="vm", created_at="2026-11-29T07:54:41+00:00")
    make_run(tmp_path / "s", "other", host="vm", created_at="2026-11-29T07:55:00+00:00")
    make_run(tmp_path / "u", "mine", host="box", created_at="2026-11-29T09:00:00+00:00")
    runs = available_runs(tmp_path / "u", tmp_path / "s")
    assert sorted(compare_runs.labels(runs).values()) == ["mine", "sample-ddp", "sample: other"]
    assert compare_runs.provenance(runs) == [
        "Recorded on test, box: mine (2026-11-29 09:00)",
        "Recorded on test, vm: sample: other (2026-11-29 07:55), sample-ddp (2026-11-29 07:54)",
    ]


class _S:
    def __init__(self, step, value):
        self.step, self.value = step, value


def test_loss_agreement_finds_where_curves_part():
    base = _S([0, 10, 20, 30, 40], [2.0, 1.5, 1.0, 0.8, 0.6])
    same_then_apart = _S([0, 10, 20, 30, 40], [2.0, 1.5 * (1 + 5e-4), 1.0, 0.8 * 1.01, 0.6])
    # parts at 30, even if 40 agrees again
    assert comparison.loss_agreement(same_then_apart, base) == 20
    assert comparison.loss_agreement(base, base) == 40
    # differs at the first step
    assert comparison.loss_agreement(_S([0, 10], [3.0, 1.5]), base) is None
    assert comparison.loss_agreement(_S([5, 15], [1.0, 1.0]), base) is None  # no common step
    only_some = _S([10, 20, 25], [1.5, 1.0, 9.0])  # compared on common steps only
    assert comparison.loss_agreement(only_some, base) == 20
    assert comparison.loss_agreement(_S([0, 10], [2.0, float("nan")]), base) == 0
    assert comparison.loss_agreement(None, base) is None


def test_every_number_column_has_its_page_format(trio):
    df = frame(compare(trio))
    formats = table.column_formats(df.columns)
    numbers = [c for c in df.columns if c not in table.TEXT_COLUMNS]
    # counts are shown as they are; every measured figure has a format keyed by its column
    assert set(formats) == set(numbers) - {"world size", "global batch", "per-device batch"}
    assert formats["peak MiB cuda1"].format == "%.0f" and formats["speedup"].format == "%.2f"
    assert "0.1%" in formats["loss matches baseline to step"].help
    assert table.column_formats(["run", "nope"]) == {}


def test_runs_are_the_registrys_records(tmp_path):
    root = tmp_path / "r"
    make_run(root, "done", created_at="2026-11-29T07:00:00+00:00")
    make_run(root, "live", summary=False, state="running", created_at="2026-11-29T07:01:00+00:00")
    by_hand = root / "by-hand"  # a trainer run by hand (python -m training.train): only its summary
    by_hand.mkdir()
    (by_hand / "summary.json").write_text(
        json.dumps({"mode": "single", "completed": True, "started_at": "2026-11-29T06:00:00+00:00"})
    )
    runs = {r.run_id: r for r in load_runs(root)}
    for run_id, r in runs.items():  # one parser: Compare sees what the Live page sees
        assert r.record == registry.get_run(run_id, root)
    assert runs["done"].state == "succeeded" and runs["live"].state == "running"
    assert runs["by-hand"].state == "succeeded" and runs["by-hand"].name == "by-hand"
    assert runs["done"].recorded_on == "test, box" and runs["done"].host == "box"
    assert load_run(root / "done").key == "done"
    assert load_run(root / "done", sample=True).key == "sample/done"
    assert load_run(root / "missing") is None
