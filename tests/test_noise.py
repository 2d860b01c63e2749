"""lab.views.compare.noise, .repeats, .table, .report and .document on run folders
written by the test (summary.json with ``throughput``, status.json with ``interference``), so every
figure is known exactly; and ``python -m lab compare`` / ``sweep --repeats`` on bad input. Real
runs: tests/test_noise_runs.py."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest

from lab.engine.spec.run import ConfigError, RunConfig
from lab.engine.sweep.plan import interleaved
from lab.views.compare import document as compare_json
from lab.views.compare import noise, report
from lab.views.compare import repeats as compare_repeats
from lab.views.compare import table as cols
from lab.views.compare.comparison import compare
from lab.views.compare.figures import run_spread
from lab.views.compare.spread import Spread, ratio
from lab.views.compare.table import frame
from tests.helpers.cli import run_lab
from tests.helpers.compare_runs import BUSY, QUIET, load_runs, make_run, spread_run

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def four(tmp_path):
    root = tmp_path / "runs"
    spread_run(
        root,
        "a-single",
        1000,
        950,
        1050,
        created_at="2026-11-29T07:00:00+00:00",
        interference=QUIET,
    )
    spread_run(
        root,
        "b-dp",
        1020,
        900,
        1100,
        mode="dp",
        devices=("cuda0", "cuda1"),
        created_at="2026-11-29T07:01:00+00:00",
        interference=BUSY,
    )
    spread_run(
        root,
        "c-ddp",
        1800,
        1700,
        1900,
        mode="ddp",
        devices=("cuda0", "cuda1"),
        created_at="2026-11-29T07:02:00+00:00",
    )
    spread_run(root, "d-slow", 600, 550, 650, created_at="2026-11-29T07:03:00+00:00")
    return root, load_runs(root)


@pytest.fixture
def repeated(tmp_path):
    """One sweep, three runs of each group: single (the baseline), ddp 1.8x, a slow single-device
    group at 0.6x; every run's windows tight."""
    root = tmp_path / "runs"
    groups = [("single", ("cuda0",), 1000), ("ddp", ("cuda0", "cuda1"), 1800)]
    for i in range(3):
        for mode, devices, tp in groups:
            median = tp * (1 + 0.01 * (i - 1))
            spread_run(
                root,
                f"{mode}-{i}",
                median,
                median * 0.99,
                median * 1.01,
                mode=mode,
                devices=devices,
                sweep_id="s1",
                created_at=f"2026-11-29T07:0{i}:{len(devices)}0+00:00",
            )
    return root, load_runs(root)


def test_table_shows_intervals_and_verdicts(four):
    _, runs = four
    df = frame(compare(runs, baseline_key="a-single")).set_index("run")
    assert df.loc["c-ddp", "speedup"] == pytest.approx(1.8)
    assert df.loc["c-ddp", cols.SPEEDUP_CI] == (
        f"1.80× ({1700 / 1050:.2f}–{1900 / 950:.2f}, within-run windows only, no run-to-run "
        "evidence; too few runs for a verdict: repeat each side at least 3 times)"
    )
    assert (
        df.loc["c-ddp", cols.EFFICIENCY_CI] == f"0.90 ({1700 / 1050 / 2:.2f}–{1900 / 950 / 2:.2f})"
    )
    # one run against one run makes no claim, however far its windows lie from 1.0: identical
    # pairs here measured 1.33x and 0.71x (verdict.one_run_each)
    for run in ("b-dp", "c-ddp", "d-slow"):
        assert df.loc[run, cols.VERDICT] == "within noise", run
    assert df.loc["a-single", cols.VERDICT] == "baseline"
    assert list(df[cols.MACHINE]) == ["", "", "busy", "quiet"]  # newest first; c, d have no record
    assert cols.emphasis(df.reset_index()) == ["", "", "", ""]


def test_repeated_groups_get_verdicts_and_colours(repeated):
    _, runs = repeated
    df = frame(compare(runs)).set_index("run")
    assert set(df.loc[[f"ddp-{i}" for i in range(3)], cols.VERDICT]) == {"faster"}
    assert "range of 3×3 pairs, 90%" in df.loc["ddp-1", cols.SPEEDUP_CI]
    assert set(df.loc[[f"single-{i}" for i in range(3)], cols.VERDICT]) == {"baseline"}
    colours = dict(zip(df.index, cols.emphasis(df.reset_index())))
    assert {colours[f"ddp-{i}"] for i in range(3)} == {cols.GREEN}
    assert {colours[f"single-{i}"] for i in range(3)} == {""}
    html = report.build_html(compare(runs))
    assert f"{cols.GREEN[len('background-color: ') :]}" in html


def test_csv_and_html_carry_the_same(four):
    _, runs = four
    df = frame(compare(runs, baseline_key="a-single"))
    back = pd.read_csv(io.BytesIO(cols.table_csv(df))).set_index("run")
    assert back.loc["b-dp", cols.VERDICT] == "within noise"
    assert back.loc["c-ddp", cols.SPEEDUP_CI].startswith("1.80× (")
    html = report.build_html(compare(runs, "a-single"))
    assert "1.80× (" in html and "within noise" in html and "Busy machine" in html
    # one run each: no row is coloured
    assert f"{cols.GREEN[len('background-color: ') :]}" not in html
    # the note, with the group's own numbers
    assert "<b>dp on 2</b> reads 1.02× (0.86–1.16, within-run windows only" in html


def test_noise_note_names_the_numbers(four):
    _, runs = four
    c = compare(runs, "a-single")
    notes = noise.noise_notes(c.groups)
    assert notes[0] == noise.NOISE_TEXT and len(notes) == 5  # one run each: all within noise
    by = {n.split("** reads")[0]: n for n in notes[2:]}
    assert "too few runs for any verdict" in by["**ddp on 2"]
    assert notes[1].startswith("**Baseline**: single (a-single) on 1 device, 1 run, 1000 samples/s")
    assert "Noise margin 10% (documented default, 10%)" in notes[1]
    assert "1 run, 1020 samples/s" in by["**dp on 2"]
    assert "95%" not in " ".join(notes)


def test_spread_from_events_for_runs_without_it(tmp_path):
    make_run(tmp_path / "r", "old")  # a summary.json from before ``throughput``
    run = load_runs(tmp_path / "r")[0]

    class S:
        step = [10, 20, 30, 40, 50, 60]
        value = [1.0, 100.0, 104.0, 96.0, 110.0, 90.0]

    s = run_spread(run, {"perf/samples_per_sec": S()})
    # the first window left out
    assert (s.median, s.ci_low, s.ci_high, s.windows) == (100.0, 90.0, 110.0, 5)
    assert run_spread(run) is None


def test_busy_note_and_warnings(four):
    _, runs = four
    assert noise.busy_note(None) is None and noise.busy_note(QUIET) is None
    assert "Busy machine: other processes kept 1.2 of the 2 cores" in noise.busy_note(BUSY)
    warns = noise.busy_warnings(runs)
    assert [w.key for w in warns] == ["busy_machine"] and warns[0].message.startswith(
        "b-dp: Busy machine"
    )


def test_by_mode_groups_repeats_of_a_sweep(tmp_path):
    root = tmp_path / "r"
    for i, (mode, med) in enumerate(
        [("single", 100), ("ddp", 180), ("single", 110), ("ddp", 170), ("single", 90), ("ddp", 200)]
    ):
        spread_run(
            root,
            f"{i}-{mode}",
            med,
            med - 5,
            med + 5,
            mode=mode,
            sweep_id="sweep-x",
            devices=("cpu0", "cpu1") if mode == "ddp" else ("cpu0",),
            created_at=f"2026-11-29T07:0{i}:00+00:00",
        )
    runs = load_runs(root)
    groups = {g["mode"]: g for g in compare_repeats.by_mode(runs, None, "0-single")}
    assert groups["single"] == {
        "sweep_id": "sweep-x",
        "mode": "single",
        "median": 100.0,
        "min": 90.0,
        "max": 110.0,
        "repeats": 3,
        "spread_pct": 20.0,
        "run_ids": ["4-single", "2-single", "0-single"],
        "speedup": 1.0,
        "ci_low": None,
        "ci_high": None,
        "coverage_text": None,
        "verdict": "baseline",
    }
    assert groups["ddp"]["median"] == 180.0 and groups["ddp"]["speedup"] == 1.8
    # against the baseline's group: the range of the 3×3 pairs of runs, 90%
    assert groups["ddp"]["ci_low"] == pytest.approx(170 / 110)
    assert groups["ddp"]["coverage_text"] == "range of 3×3 pairs, 90%"
    assert groups["ddp"]["verdict"] == "faster"
    table = cols.repeats_frame(compare(runs, "0-single"))
    assert list(table["repeats"]) == [3, 3]
    assert compare_repeats.by_mode(runs[:2], None) == []  # one run per mode: no repeats to show


def test_comparison_json(four):
    _, runs = four
    c = compare(runs, "a-single")
    doc = compare_json.to_json(c)
    assert doc["baseline"] == "a-single" and doc["by_mode"] == []
    by = {r["run_id"]: r for r in doc["runs"]}
    r = ratio(Spread(1800, 1700, 1900, 20, 0.96), Spread(1000, 950, 1050, 20, 0.96))
    assert by["c-ddp"]["speedup"] == r.to_json()
    assert by["c-ddp"]["efficiency"] == r.scaled(0.5).to_json()
    assert by["c-ddp"]["throughput"] == {
        "median": 1800,
        "ci_low": 1700,
        "ci_high": 1900,
        "windows": 20,
        "coverage": 0.9586,  # the order-statistics interval of 20 windows, were they independent
    }
    assert by["b-dp"]["speedup"]["within_noise"] is True and by["b-dp"]["interference"] == BUSY
    assert by["c-ddp"]["interference"] is None
    assert any("Busy machine" in w for w in doc["warnings"])
    lines = compare_json.text(c)
    cards = doc["headline"]  # the answer first: one line per mode, then the table
    assert {"dp", "ddp"} <= {x["mode"] for x in cards}
    assert all(x.startswith("headline: ") for x in lines[1 : 1 + len(cards)])
    assert lines[0].startswith("baseline: a-single (a-single); group single (a-single) on 1")
    assert "within noise" in lines[1 + len(cards)]


@pytest.mark.proc
def test_compare_command(four):
    root, _ = four
    res = run_lab(root, "compare", "c-ddp", "b-dp", "--baseline", "a-single", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["baseline"] == "a-single" and [r["run_id"] for r in doc["runs"]] == [
        "c-ddp",
        "b-dp",
        "a-single",
    ]
    res = run_lab(root, "compare", "nope")
    assert (
        res.returncode == 2
        and res.stderr.startswith("error: no run 'nope'")
        and "Traceback" not in res.stderr
    )
    res = run_lab(root, "compare", "sweep-20260101-000000-abcd")
    assert (
        res.returncode == 2
        and "no sweep" in res.stderr
        and len(res.stderr.strip().splitlines()) == 1
    )


@pytest.mark.proc
def test_interleaved_and_bad_repeats(tmp_path):
    a, b = RunConfig(mode="single", name="x-single"), RunConfig(mode="ddp", name="x-ddp")
    assert [(c.mode, c.name) for c in interleaved([a, b], 2)] == [
        ("single", "x-single-r1"),
        ("ddp", "x-ddp-r1"),
        ("single", "x-single-r2"),
        ("ddp", "x-ddp-r2"),
    ]
    assert interleaved([a, b], 1) == [a, b]
    with pytest.raises(ConfigError, match="use 1 to 20"):
        interleaved([a], 0)
    res = run_lab(tmp_path, "sweep", "--modes", "single", "--repeats", "0")
    assert res.returncode == 2 and res.stderr.startswith(
        "error: repeats: 0 is not a number of repeats"
    )
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_a_weak_scaling_run_is_not_a_repeat_of_the_strong_ones(tmp_path):
    """A sweep's weak DDP run trains another global batch: it is grouped apart from the strong DDP
    repeats."""
    from types import SimpleNamespace

    from lab.views.compare import repeats as compare_repeats

    def run(name, mode, scaling):  # the attributes of a CompareRun that grouping reads
        return SimpleNamespace(
            run_id=name,
            sweep_id="sweep-1",
            summary={"mode": mode},
            scaling=scaling,
            option=lambda key: None,
            varied_text="",  # no knob sweep
        )

    runs = [
        run("s1", "single", "strong"),
        run("d1", "ddp", "strong"),
        run("s2", "single", "strong"),
        run("d2", "ddp", "strong"),
        run("dw", "ddp", "weak"),
    ]
    got = {k: [r.run_id for r in v] for k, v in compare_repeats.groups(runs).items()}
    assert got == {
        ("sweep-1", "single"): ["s1", "s2"],
        ("sweep-1", "ddp"): ["d1", "d2"],
        ("sweep-1", "ddp (weak)"): ["dw"],
    }


def test_a_device_count_sweeps_repeats_group_each_count_apart(tmp_path):
    """``sweep --modes single,ddp --devices 1,2 --repeats 2``: each count of ddp is a group of its
    own repeats (``ddp x1``, ``ddp x2``); a mode run at one count keeps its plain name."""
    root = tmp_path / "r"
    plan = [("single", 1, 100), ("ddp", 1, 95), ("ddp", 2, 170)] * 2
    for i, (mode, n, med) in enumerate(plan):
        spread_run(
            root,
            f"{i}-{mode}{n}",
            med + i,
            med - 5,
            med + 5,
            mode=mode,
            sweep_id="sweep-d",
            devices=tuple(f"cpu{k}" for k in range(n)),
            created_at=f"2026-11-29T07:0{i}:00+00:00",
        )
        run_json = root / f"{i}-{mode}{n}" / "run.json"  # DDP's count is its processes
        doc = json.loads(run_json.read_text())
        doc["config"]["nproc"] = n
        run_json.write_text(json.dumps(doc))
    groups = {g["mode"]: g for g in compare_repeats.by_mode(load_runs(root), None, "0-single1")}
    assert set(groups) == {"single", "ddp x1", "ddp x2"}
    assert {g["repeats"] for g in groups.values()} == {2}
    assert groups["ddp x2"]["run_ids"] == ["5-ddp2", "2-ddp2"]
