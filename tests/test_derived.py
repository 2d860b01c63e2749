"""Derived figures of runs without summary.json: lab.views.compare.derived, .speed and .fairness,
through the Comparison's table (lab.views.compare.table), lab.views.compare.runs (foreign logs) and
``python -m lab compare``.

The run folders are written by the test in the contract's shape: a user's script run (run.json and
status.json with ``kind: "script"``, its curves in a folder linked through ``events_dirs`` outside
the run folder, written by torch's SummaryWriter as a user's script writes them), device samples in
``sys/`` written by the supervisor's own writer (``lab.engine.scalars.ScalarWriter``), and
a trainer run with summary.json. Every event file is real and read back through lab.events; the wall
times are chosen so that every expected number is known exactly."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lab.cli.compare import resolve
from lab.events import LogdirReader
from lab.views.compare import derived
from lab.views.compare import runs as compare_runs
from lab.views.compare import table as compare_columns
from lab.views.compare.comparison import compare
from lab.views.compare.table import frame
from lab.views.runscalars import folder_scalars
from tests.helpers.cli import lab_in_process
from tests.helpers.compare_runs import available_runs, load_runs, make_run
from tests.helpers.derived import T0, _foreign, _sys, _tb

ISO = lambda t: datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")  # noqa: E731
# the script's loss: step rates 2, 2, 4, 4, 4 steps/s; the first is warm-up, the median of the rest
# is 4
SCRIPT_WALL = [0.0, 0.5, 1.0, 1.25, 1.5, 1.75]
# the trainer's: 10 steps every second, so 10 steps/s in every window
BASE_WALL = [0.0, 1.0, 2.0, 3.0, 4.0]


class S:
    """The shape of lab.events.Series."""

    def __init__(self, steps, walls, values=None):
        self.step = np.asarray(steps, dtype=float)
        self.wall_time = np.asarray(walls, dtype=float)
        self.value = np.asarray(values if values is not None else [1.0] * len(steps), dtype=float)


def script_run(root: Path, run_id: str, cwd: Path, *, gpus=(2, 3), extra_tags=None) -> Path:
    d = root / run_id
    d.mkdir(parents=True)
    config = {
        "kind": "script",
        "script": str(cwd / "train.py"),
        "args": [],
        "cwd": str(cwd),
        "mode": "ddp",
        "gpus": list(gpus),
        "nproc": 2,
        "nnodes": 1,
    }
    (d / "run.json").write_text(
        json.dumps(
            {
                "run_id": run_id,
                "name": run_id,
                "kind": "script",
                "config": config,
                "created_at": ISO(T0 + 60),
                "host": "box",
                "cwd": str(cwd),
            }
        )
    )
    linked = cwd / "runs" / "Nov29_box"
    (d / "status.json").write_text(
        json.dumps(
            {
                "state": "succeeded",
                "kind": "script",
                "started_at": ISO(T0 - 5),
                "ended_at": ISO(T0 + 25),
                "events_dirs": [str(linked)],
            }
        )
    )
    rows = [(i + 1, t, 2.0 - 0.1 * i) for i, t in enumerate(SCRIPT_WALL)]
    _tb(linked, {"train/loss": rows, **(extra_tags or {})})
    _sys(
        d / "sys",
        {
            "sys/gpu2/util_pct": [90, 95, 100],
            "sys/gpu2/mem_used_mib": [1000, 3000, 2000],
            "sys/gpu3/util_pct": [0, 1, 2],
            "sys/gpu3/mem_used_mib": [500, 800, 700],
        },
    )
    return d


@pytest.fixture
def pair(tmp_path):
    """A trainer single run with summary.json (the baseline) and a user's DDP script on gpu2 and
    gpu3."""
    root = tmp_path / "runs"
    base = make_run(root, "base", created_at=ISO(T0))
    _tb(base / "tb", {"train/loss": [(10 * (i + 1), t, 1.0) for i, t in enumerate(BASE_WALL)]})
    script_run(root, "mine", tmp_path / "work")
    runs = load_runs(root)
    scalars = {r.key: folder_scalars(r.event_folders, LogdirReader) for r in runs}
    return runs, scalars


def test_step_rate_is_the_median_of_the_steady_windows():
    rate, spread = derived.step_rate(S([1, 2, 3, 4, 5, 6], SCRIPT_WALL))
    assert rate == 4.0 and spread.median == 4.0 and (spread.ci_low, spread.ci_high) == (2.0, 4.0)
    assert spread.windows == 4
    # one window: the span's rate, no interval
    rate, spread = derived.step_rate(S([5, 10], [0.0, 2.0]))
    assert rate == 2.5 and spread is None
    # a step logged twice is no rate
    rate, _ = derived.step_rate(S([1, 1, 2, 3], [0.0, 0.1, 1.0, 2.0]))
    assert rate == 1.0
    assert derived.step_rate(S([3], [1.0])) == (None, None) and derived.step_rate(None) == (
        None,
        None,
    )


def test_throughput_and_loss_tags_offered():
    sc = {
        "a": {
            "throughput/img_per_sec": S([1], [0]),
            "zeta": S([1], [0]),
            "Loss/train": S([1], [0]),
            "sys/gpu0/util_pct": S([1], [0]),
        },
        "b": {
            "train/loss": S([1], [0]),
            "perf/samples_per_sec": S([1], [0]),
            "val/loss": S([1], [0]),
        },
    }
    assert derived.throughput_options(sc) == [
        "perf/samples_per_sec",
        "throughput/img_per_sec",
        derived.STEP_RATE,
        "Loss/train",
        "train/loss",
        "val/loss",
        "zeta",
    ]
    assert derived.loss_options(sc)[:3] == ["train/loss", "Loss/train", "val/loss"]
    # its own, when it lacks the chosen one
    assert derived.loss_tag_of(sc["a"], "train/loss") == "Loss/train"
    assert derived.loss_tag_of(sc["b"], "val/loss") == "val/loss"
    assert derived.loss_tag_of({"acc": S([1], [0])}) is None
    assert derived.option_label(derived.STEP_RATE) == "steps/s of the loss tag"


def test_a_script_beside_the_trainer_gets_derived_figures_marked(pair):
    runs, scalars = pair
    df = frame(compare(runs, baseline_key="base", scalars=scalars)).set_index("run")
    assert df.loc["mine", "figures"] == "derived" and df.loc["base", "figures"] == "measured"
    assert df.loc["mine", "devices"] == "gpu2, gpu3" and df.loc["mine", "world size"] == 2
    assert df.loc["mine", "steps/s"] == 4.0 and df.loc["base", "steps/s"] == 10.0
    assert df.loc["mine", "speedup of"] == "steps/s of train/loss"
    assert df.loc["mine", "speedup"] == pytest.approx(0.4)
    assert df.loc["mine", "efficiency"] == pytest.approx(0.2)  # strong, assumed: 0.4 x 1 device / 2
    assert df.loc["mine", "scaling"] == "strong (assumed)"
    assert (
        df.loc["mine", compare_columns.SPEEDUP_CI].startswith("0.40× (0.20–0.40, within-run")
        and df.loc["mine", "noise"] == "within noise"  # one run each: no claim
    )
    assert (
        pd.isna(df.loc["mine", "throughput (samples/s)"])
        and df.loc["base", "throughput (samples/s)"] == 1000.0
    )
    # NVML's used memory per physical GPU, its imbalance; the trainer's allocator peak in a column
    # of its own
    assert df.loc["mine", "peak MiB gpu2"] == 3000.0 and df.loc["mine", "peak MiB gpu3"] == 800.0
    assert pd.isna(df.loc["mine", "peak MiB cuda0"]) and pd.isna(df.loc["base", "peak MiB gpu2"])
    assert df.loc["mine", "memory imbalance"] == pytest.approx((3000 - 800) / 1900)
    assert df.loc["mine", "util % gpu2"] == 95.0 and df.loc["mine", "util % gpu3"] == 1.0
    assert df.loc["mine", "wall time (s)"] == 30.0  # the supervisor's start to end
    assert df.loc["mine", "final train loss"] == pytest.approx(1.5)


def test_the_warnings_say_what_is_derived_and_what_the_lab_cannot_see(pair):
    runs, scalars = pair
    warns = {w.key: w.message for w in list(compare(runs, "base", scalars).warnings)}
    assert set(warns) == {"derived", "steps_speedup", "lab_sees", "idle_gpus"}, warns
    assert "steps/s of train/loss" in warns["derived"] and "NVML's used memory" in warns["derived"]
    assert (
        "The speedup of mine is of steps/s" in warns["steps_speedup"]
        and "assumes" in warns["steps_speedup"]
    )
    assert (
        "devices it gave (gpu2, gpu3)" in warns["lab_sees"]
        and "mode it launched (ddp)" in warns["lab_sees"]
    )
    assert warns["idle_gpus"].startswith("gpu3 given to mine stayed idle")
    # the script's unknown model, batch and seed are not "differences"; no summary is the derived
    # warning
    assert not {"model", "global_batch", "seed", "amp", "no_summary", "scaling"} & set(warns)


def test_a_picked_throughput_tag_is_divided_by_the_baselines_samples(tmp_path):
    root = tmp_path / "runs"
    base = make_run(root, "base", created_at=ISO(T0))
    rates = [(i + 1, float(i), v) for i, v in enumerate([50.0, 600.0, 500.0, 700.0])]
    script_run(root, "mine", tmp_path / "work", extra_tags={"throughput/img_per_sec": rates})
    runs = load_runs(root)
    scalars = {r.key: folder_scalars(r.event_folders, LogdirReader) for r in runs}
    assert derived.default_throughput(runs, scalars) == "throughput/img_per_sec"
    df = frame(compare(runs, "base", scalars, throughput_tag="throughput/img_per_sec")).set_index(
        "run"
    )
    # median of the windows after the first
    assert df.loc["mine", "throughput (samples/s)"] == 600.0
    assert df.loc["mine", "speedup"] == pytest.approx(0.6)
    assert df.loc["mine", "speedup of"] == "throughput/img_per_sec against the baseline's samples/s"
    keys = [w.key for w in list(compare(runs, "base", scalars, "throughput/img_per_sec").warnings)]
    assert "picked_tag" in keys and "steps_speedup" not in keys
    # steps/s chosen instead: no figure in common until the baseline logs its loss too
    df = frame(compare(runs, "base", scalars, throughput_tag=derived.STEP_RATE)).set_index("run")
    assert pd.isna(df.loc["mine", "throughput (samples/s)"]) and pd.isna(df.loc["mine", "speedup"])
    assert df.loc["mine", compare_columns.SPEEDUP_CI] == ""
    assert pd.isna(df.loc["mine", "speedup of"])
    _tb(base / "tb", {"train/loss": [(10 * (i + 1), t, 1.0) for i, t in enumerate(BASE_WALL)]})
    scalars = {r.key: folder_scalars(r.event_folders, LogdirReader) for r in runs}
    df = frame(compare(runs, "base", scalars, throughput_tag=derived.STEP_RATE)).set_index("run")
    assert df.loc["mine", "speedup of"] == "steps/s of train/loss" and df.loc[
        "mine", "speedup"
    ] == pytest.approx(0.4)


def test_a_script_as_the_baseline_makes_the_trainer_compare_by_steps(pair):
    runs, scalars = pair
    df = frame(compare(runs, baseline_key="mine", scalars=scalars)).set_index("run")
    assert df.loc["base", "speedup of"] == "steps/s of train/loss" and df.loc[
        "base", "speedup"
    ] == pytest.approx(2.5)
    assert df.loc["base", "efficiency"] == pytest.approx(5.0)  # 2.5 x 2 devices / 1
    warns = [w.key for w in list(compare(runs, "mine", scalars).warnings)]
    assert "steps_speedup" in warns and "scaling" not in warns


def test_columns_say_what_derived_figures_are():
    formats = compare_columns.column_formats(
        ["peak MiB gpu2", "peak MiB cuda0", "steps/s", "wall time (s)"]
    )
    assert (
        formats["peak MiB gpu2"].help == compare_columns.PEAK_NVML_HELP
        and "not the allocator" in formats["peak MiB gpu2"].help
    )
    assert (
        formats["peak MiB cuda0"].help == compare_columns.PEAK_HELP
        and formats["steps/s"].format == "%.3g"
    )
    helps = compare_columns.text_help(["run", "figures", "speedup of", "noise"])
    assert set(helps) == {"figures", "speedup of", "noise"} and "derived" in helps["figures"]


def test_foreign_logs_with_device_samples_are_a_run(pair, tmp_path):
    root = tmp_path / "runs"
    folder = _foreign(root)
    (root / "plain").mkdir()  # no sys/: not offered
    runs = available_runs(root, tmp_path / "no-samples")
    foreign = [r for r in runs if r.foreign]
    assert [r.name for r in foreign] == ["their-logs"] and foreign[0].kind == compare_runs.FOREIGN
    assert foreign[0].key == str(folder.resolve())
    # dated by its oldest event file
    assert datetime.fromisoformat(foreign[0].created_at).tzinfo is not None
    scalars = {r.key: folder_scalars(r.event_folders, LogdirReader) for r in runs}
    df = frame(compare(runs, baseline_key="base", scalars=scalars)).set_index("run")
    row = df.loc["their-logs"]
    assert (
        row["figures"] == "derived" and row["devices"] == "gpu0" and row["peak MiB gpu0"] == 400.0
    )
    # the sys/ span; Loss/train, its own loss tag
    assert row["wall time (s)"] == 3.0 and row["steps/s"] == 4.0
    assert row["speedup of"] == "steps/s of Loss/train against the baseline's train/loss"
    warns = {w.key: w.message for w in list(compare(runs, "base", scalars).warnings)}
    assert "only the GPUs sampled in its sys/ (gpu0)" in warns["lab_sees"]


def _cli(capsys, *args) -> tuple[int, str, str]:
    r = lab_in_process(capsys, *args)
    return r.returncode, r.stdout, r.stderr


def test_the_compare_command_names_folders_and_a_throughput_tag(
    pair, tmp_path, monkeypatch, capsys
):
    root = tmp_path / "runs"
    monkeypatch.setenv("LAB_RUNS_DIR", str(root))
    folder = _foreign(tmp_path / "elsewhere")
    rc, out, err = _cli(capsys, "compare", "base", "mine", str(folder), "--json")
    assert rc == 0, err
    doc = json.loads(out)
    by_id = {r["run_id"]: r for r in doc["runs"]}
    assert doc["baseline"] == "base" and doc["throughput_tag"] == derived.STEP_RATE
    mine = by_id["mine"]
    assert (mine["kind"], mine["figures"], mine["speedup_of"]) == (
        "script",
        "derived",
        "steps/s of train/loss",
    )
    assert mine["speedup"]["value"] == pytest.approx(0.4) and mine["efficiency"][
        "value"
    ] == pytest.approx(0.2)
    assert mine["steps_per_sec"]["median"] == 4.0 and mine["throughput"] is None
    assert mine["peak_mem_mib"] == {"gpu2": 3000.0, "gpu3": 800.0} and mine["peak_mem_of"] == "nvml"
    assert mine["wall_time_s"] == 30.0
    assert by_id["their-logs"]["kind"] == "foreign" and by_id["base"]["figures"] == "measured"
    assert any("figures are derived" in w for w in doc["warnings"])
    rc, out, err = _cli(capsys, "compare", "base", "mine")
    assert rc == 0 and "derived" in out and "steps/s of train/loss" in out
    rc, out, err = _cli(capsys, "compare", "base", "mine", "--throughput-tag", "nope")
    assert (
        rc == 2
        and out == ""
        and err.startswith("error: --throughput-tag nope: none of these runs logs it")
    )
    assert derived.STEP_RATE in err and "\n" not in err.strip()
    rc, out, err = _cli(capsys, "compare", "base", str(tmp_path / "empty") + "/")
    assert rc == 2 and "holds no run and no event files" in err


def test_resolve_takes_a_run_folder_by_its_path(pair, tmp_path):
    root = tmp_path / "runs"
    runs = resolve([str(root / "mine"), "base", str(root / "mine")], root)
    assert [r.key for r in runs] == ["mine", "base"] and runs[0].kind == "script"
