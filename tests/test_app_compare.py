"""The Compare page under AppTest, on the real recorded sample runs (sample_data/runs).

LAB_RUNS_DIR points at an empty private folder ("fresh clone"), so the page
falls back to the sample runs, opening on the newest sample sweep (the device-count one, with its
scaling view); its table must hold exactly what lab.views.compare.table
computes for them. A user run copied from a sample run with another seed makes
the fairness warning appear.
"""

from __future__ import annotations

import json
import re
import shutil

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from lab.events import LogdirReader
from lab.runfolder import REPO_ROOT, SAMPLE_RUNS
from lab.views.compare import anatomy, memory, modes, scaling_chart
from lab.views.compare import runs as compare_runs
from lab.views.compare.comparison import choose_baseline, compare
from lab.views.compare.figures import run_figures
from lab.views.compare.table import frame
from lab.views.runscalars import run_scalars
from tests.helpers.compare_runs import available_runs, load_runs, sample_sweep
from tests.helpers.comparison import notes_shown

PAGE = str(REPO_ROOT / "pages" / "3_Compare.py")


def _page() -> AppTest:
    return AppTest.from_file(PAGE, default_timeout=30).run()


def _expected(user_root) -> pd.DataFrame:
    runs = available_runs(user_root, SAMPLE_RUNS)
    keys = compare_runs.default_selection(runs)
    chosen = [r for k in keys for r in runs if r.key == k]
    scalars = {r.key: run_scalars(LogdirReader(r.run_dir)) for r in chosen}
    return frame(compare(chosen, baseline_key=choose_baseline(chosen), scalars=scalars))


def test_the_sample_runs_are_shipped():
    # A deleted sample run is a defect of the project: the fresh-clone pages rest on them.
    modes = sorted(run_figures(r).mode for r in load_runs(SAMPLE_RUNS, sample=True))
    assert set(modes) == {"ddp", "dp", "single", "fsdp"}, (
        f"{SAMPLE_RUNS}: re-record with scripts/record_sample_runs.py"
    )


def test_fresh_clone_shows_the_sample_runs_exactly(runs_dir):
    at = _page()
    assert not at.exception
    assert any("sample runs" in c.value for c in at.caption)
    shown = at.dataframe[0].value
    expected = _expected(runs_dir)
    samples = load_runs(SAMPLE_RUNS, sample=True)
    # the newest sample sweep, whole: the memory-trade one (single, DDP and FSDP x 1 and x 2,
    # 2 each)
    scaling = sample_sweep(samples, "fsdp")
    assert len(shown) == len(scaling) == 10 and len(samples) == 29
    pd.testing.assert_frame_equal(shown.reset_index(drop=True), expected, check_dtype=False)
    # CPU sample runs: the utilisation timeline says it shows the CPU instead.
    assert any("sys/cpu_pct" in i.value for i in at.info)
    # its scaling view: throughput and efficiency against the count, and the counts x modes table
    heads = [s.value for s in at.subheader]
    assert {scaling_chart.THROUGHPUT_CAPTION, scaling_chart.EFFICIENCY_CAPTION} <= set(heads)
    c = compare(scaling, scalars=compare_runs.read_scalars(scaling, LogdirReader))
    seeds = scaling_chart.table(c.scaling_curve)
    assert list(seeds["devices"]) == [1, 2]
    assert any(d.value.equals(seeds) for d in at.dataframe)
    # with an fsdp curve beside ddp's: a column per mode, a cell at each count
    fsdp = next(col for col in seeds.columns if col.startswith("fsdp"))
    assert all(seeds[fsdp]) and any(col.startswith("ddp") for col in seeds.columns)
    # loss, throughput, speedup, memory, system, the two scaling charts, memory per device
    # against throughput (five points); and first the anatomy bars once profiled (not these)
    profiled = [r for r in scaling if anatomy.breakdown(r.run_dir, r.summary)]
    assert len(at.get("plotly_chart")) == 5 + 2 + 1 + bool(profiled)
    assert ("Anatomy of a step" in heads) == bool(profiled)
    assert memory.FRONTIER_CAPTION in heads
    trade = memory.trade(memory.frontier(scaling))
    assert trade and any(trade[-1] in c.value for c in at.caption)  # "fsdp on 2 uses 72% ..."


def test_the_modes_sample_sweep_shows_dp_falling_back(runs_dir):
    # the other shipped sweep: single, DP and DDP at one device count each, so no scaling view
    at = _page()
    modes_sweep = sample_sweep(load_runs(SAMPLE_RUNS, sample=True), "sample")
    at.multiselect(key="cmp_runs").set_value([f"sample/{r.run_id}" for r in modes_sweep]).run()
    assert not at.exception
    assert len(at.dataframe[0].value) == len(modes_sweep) == 10
    # DP on a GPU-less machine fell back to single: said, not hidden.
    assert any("asked to run as dp but ran as single" in w for w in notes_shown(at))
    assert any("not run as asked" in w.value for w in at.warning)  # the counting line
    assert scaling_chart.THROUGHPUT_CAPTION not in [s.value for s in at.subheader]


def test_toggles_and_baseline(runs_dir):
    at = _page()
    at.radio(key="cmp_x").set_value("wall")
    at.radio(key="cmp_sys").set_value("mem")
    at.selectbox(key="cmp_tag").set_value("val/acc")
    ddp = next(k for k in at.multiselect(key="cmp_runs").value if "ddp" in k)
    at.selectbox(key="cmp_baseline").set_value(ddp)
    at.run()
    assert not at.exception
    table = at.dataframe[0].value.set_index("run")
    # the chosen baseline's group: its sweep's DDP sample runs; the chosen run divides by itself
    base_rows = table[table["noise"] == "baseline"]
    assert set(base_rows["mode"]) == {"ddp"}
    assert min(abs(base_rows["speedup"] - 1.0)) == pytest.approx(0.0)
    assert any("sys/rss_mib" in i.value for i in at.info)


def test_no_run_chosen_is_a_hint_not_an_error(runs_dir):
    at = _page()
    at.multiselect(key="cmp_runs").set_value([])
    at.run()
    assert not at.exception
    assert any("Choose at least one run" in i.value for i in at.info)
    assert len(at.dataframe) == 0


def test_fairness_mismatch_shows_a_warning(runs_dir):
    # Two of the user's own runs (copies of real sample runs), one with another seed.
    src = sorted(d for d in SAMPLE_RUNS.iterdir() if (d / "summary.json").exists())
    single = next(
        d for d in src if json.loads((d / "summary.json").read_text())["mode"] == "single"
    )
    ddp = next(d for d in src if json.loads((d / "summary.json").read_text())["mode"] == "ddp")
    for d in (single, ddp):
        shutil.copytree(d, runs_dir / d.name)
    for name in ("summary.json", "run.json"):
        p = runs_dir / ddp.name / name
        data = json.loads(p.read_text())
        data["config"]["seed"] = 7
        p.write_text(json.dumps(data))
    at = _page()
    assert not at.exception
    assert len(at.dataframe[0].value) == 2  # the user's newest sweep, not the samples
    seeds = [w for w in notes_shown(at) if "differ in seed" in w]
    assert len(seeds) == 1 and "7: " in seeds[0] and "0: " in seeds[0]


def _in_order(node):
    """The page's elements top to bottom (a block's children in their order)."""
    children = getattr(node, "children", None)
    if not isinstance(children, dict):
        yield node
        return
    for _, child in sorted(children.items()):
        yield from _in_order(child)


def test_the_cards_come_first_with_their_intervals_and_colours(runs_dir):
    at = _page()
    assert not at.exception
    kinds = [type(e).__name__ for e in _in_order(at.main)]
    first = kinds.index("Metric")
    # the answer before any note, the table and every chart
    assert first < kinds.index("Warning") < kinds.index("Dataframe")
    assert all(k != "UnknownElement" for k in kinds[:first])  # no chart above the cards
    assert all(re.fullmatch(r"\d\.\d\d×", m.value) for m in at.metric)
    # the interval and its coverage
    assert all(re.fullmatch(r"\d\.\d\d–\d\.\d\d, \d+%", m.delta) for m in at.metric)
    # each card's caption carries its mode's marker, in the charts' colour
    marked = [c.value for c in at.caption if "&#9632;" in c.value]
    assert len(marked) == len(at.metric)
    assert any(modes.colour("ddp") in c and "ddp" in c for c in marked)


def test_the_picker_filters_by_regex_and_sweep(runs_dir):
    at = _page()
    picked = at.multiselect(key="cmp_runs")
    assert len(picked.value) == 10  # the newest sample sweep (the memory-trade one), whole
    at.text_input(key="cmp_run_re").set_value(r"ddp-r[12]$").run()
    assert any(c.value == "2 of 29 runs match · 10 chosen" for c in at.caption)
    at.button(key="cmp_select_matching").click().run()
    assert not at.exception
    chosen = at.multiselect(key="cmp_runs").value
    assert len(chosen) == 2 and all(re.search(r"-sample-ddp-r[12]-", k) for k in chosen)
    assert len(at.dataframe[0].value) == 2
    # a bad regex is one line, not a traceback; the sweep filter narrows to its runs
    at.text_input(key="cmp_run_re").set_value("ddp(").run()
    assert not at.exception and any("not a valid regular expression" in e.value for e in at.error)
    modes_sweep = sample_sweep(load_runs(SAMPLE_RUNS, sample=True), "sample")[0].sweep_id
    sweep = next(o for o in at.selectbox(key="cmp_sweep").options if o.startswith(modes_sweep))
    assert sweep.endswith(" · 10 runs")
    at.text_input(key="cmp_run_re").set_value("")
    at.selectbox(key="cmp_sweep").set_value(sweep.split(" · ")[0]).run()
    # the Compare-modes sweep's 10 of the 29 sample runs
    assert not at.exception and any(c.value == "10 of 29 runs match · 2 chosen" for c in at.caption)
