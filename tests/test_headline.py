"""The answer first (lab.views.compare.headline): one card per mode against the baseline, repeats
folded, on the real sample runs; the same cards on the page (st.metric, above the one folded warning
line), in ``lab compare --json`` and first in the HTML report; and small multiples capped so no
chart call raises on a large selection."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from lab.events import LogdirReader
from lab.runfolder import REPO_ROOT, SAMPLE_RUNS
from lab.views import charts
from lab.views.compare import document, report
from lab.views.compare import runs as compare_runs
from lab.views.compare.comparison import compare
from lab.views.compare.naming import few
from tests.helpers.compare_runs import available_runs, sample_sweep

PAGE = str(REPO_ROOT / "pages" / "3_Compare.py")
KEYS = {"mode", "devices", "speedup", "efficiency", "verdict", "reason"}
ADDED = {"runs", "margin_pct", "margin_source", "baseline"}


def _samples(runs_dir, stem: str | None = None):
    """The sample runs Compare opens on (the newest sample sweep), or the shipped sweep ``stem``."""
    runs = available_runs(runs_dir, SAMPLE_RUNS)
    if stem:
        chosen = sample_sweep(runs, stem)
    else:
        chosen = [r for k in compare_runs.default_selection(runs) for r in runs if r.key == k]
    return compare(chosen, scalars=compare_runs.read_scalars(chosen, LogdirReader))


def test_one_card_per_mode_with_repeats_folded(runs_dir):
    c = _samples(runs_dir, "sample")  # the Compare-modes sweep
    cards = {card.mode: card for card in c.headline}
    # the three strong DDP repeats fold into one card; the weak one is a mode of its own
    assert cards["ddp"].runs == 3 and cards["ddp (weak)"].runs == 1
    ddp_rows = [r for r in c.rows if r.figures.mode == "ddp" and r.run.scaling != "weak"]
    speeds = sorted(r.speed.speedup for r in ddp_rows)
    assert cards["ddp"].speedup == pytest.approx(speeds[1])  # the ratio of the groups' medians
    # the interval sees both sides: the range of the 3×3 pairs of runs, 90%
    base = c.baseline_group
    ddp = [r.figures.throughput for r in ddp_rows]
    assert base.runs == 3
    assert cards["ddp"].ci_low == pytest.approx(min(ddp) / max(base.values))
    assert cards["ddp"].ci_high == pytest.approx(max(ddp) / min(base.values))
    assert cards["ddp"].coverage_text == "range of 3×3 pairs, 90%"
    assert cards["ddp"].reason.startswith("DDP waits ") and "all-reduce" in cards["ddp"].reason
    assert "dp" not in cards  # a CPU machine: DP ran as single, the same code path: no card
    dp_rows = [r for r in c.rows if r.figures.mode == "dp"]
    assert sum(card.runs for card in c.headline) == len(c.rows) - 3 - len(dp_rows)
    doc = document.to_json(c)
    assert [set(x) for x in doc["headline"]] == [KEYS | ADDED] * len(c.headline)
    assert doc["headline"][0]["speedup"]["ci_low"] <= doc["headline"][0]["speedup"]["value"]
    html = report.build_html(c)
    assert html.index("<h2>Headline</h2>") < html.index("<h2>Runs</h2>")
    assert cards["ddp"].speedup_text() in html


def test_page_shows_the_cards_above_one_folded_warning_line(runs_dir):
    c = _samples(runs_dir)
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception
    # the speedup as the value, its interval beside it (the delta) and the verdict after that
    assert [m.value for m in at.metric] == [card.value_text() for card in c.headline]
    assert [m.delta for m in at.metric] == [card.delta_text() for card in c.headline]
    assert [w.value for w in at.warning] == [c.warning_summary]
    n = len(c.warnings)
    assert n and c.warning_summary.startswith(f"{n} note{'s' if n > 1 else ''}: ")


def test_a_warning_names_a_few_runs_and_counts_the_rest():
    assert few([f"r{i}" for i in range(1000)]) == "r0, r1, r2, r3 and 996 more"
    assert few(["a", "b"]) == "a, b"


def test_small_multiples_are_capped_and_never_raise():
    panels = [(f"run {i}", [("gpu0", [0, 1], [1, 2])]) for i in range(334)]
    fig = charts.timeline_figure(panels, y_title="util %")
    titles = [a.text for a in fig.layout.annotations]
    assert len(titles) == charts.MAX_PANELS and titles[-1] == "run 11"
    assert charts.panels_note(334) == "showing 12 of 334: narrow the selection"
    assert charts.panels_note(12) is None
    # 21 panels (7 rows) used to raise "Vertical spacing cannot be greater than (1 / (rows - 1))"
    charts.timeline_figure(panels[:21], y_title="util %", cols=3)


def test_the_counting_line_names_every_speed_option_and_counts_shared_causes_once():
    from lab.engine.launch import knobs
    from lab.views.compare.fairness import FairnessWarning
    from lab.views.compare.headline import warning_summary

    # each knob's words are its form field's (``cause``), as fairness gives them to its warning
    cause = {f.name: f.cause for f in knobs.FIELDS}
    keys = ("static_graph", "bucket_cap_mb", "find_unused_parameters", "accum_steps")
    line = warning_summary([FairnessWarning(k, "…", cause[k]) for k in keys])
    assert line == (
        "4 notes: 2 DDP options differ, 1 DDP bucket size differs, 1 accumulation differs"
    )
