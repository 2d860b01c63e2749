"""The one ``Comparison`` value (lab.views.compare.comparison): every rendering shows what it holds.

The page's warnings, the ``--json`` document's, the terminal text's and the HTML report's are the
one list ``compare`` built, in its order; the table's, the JSON's and the text's figures are the
run's typed ``RunFigures``; and the views read no process facts of their own (the registry's
records are passed in). Run folders are written by the test in the contract's shape."""

from __future__ import annotations

import ast
import dataclasses
import html
import json

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from lab.events import LogdirReader
from lab.runfolder import REPO_ROOT
from lab.views.compare import document, report
from lab.views.compare import runs as compare_runs
from lab.views.compare.comparison import Comparison, compare
from lab.views.compare.figures import RunFigures, run_figures
from lab.views.compare.speed import Speed
from lab.views.compare.spread import Spread
from lab.views.compare.table import frame, table_csv
from lab.views.compare.utilisation import Utilisation
from tests.helpers.compare_runs import BUSY, load_runs, make_run, spread_run
from tests.helpers.comparison import notes_shown

PAGE = str(REPO_ROOT / "pages" / "3_Compare.py")


@pytest.fixture
def warned(runs_dir):
    """Three runs with a warning of each kind: a seed apart, a DP run fallen back to one device,
    a busy machine."""
    spread_run(runs_dir, "a-single", 1000, 950, 1050, created_at="2026-11-29T07:00:00+00:00")
    make_run(
        runs_dir,
        "b-dp",
        mode="dp",
        effective_mode="single",
        reason="DataParallel needs at least two GPUs; 0 visible",
        created_at="2026-11-29T07:01:00+00:00",
    )
    spread_run(
        runs_dir,
        "c-ddp",
        1800,
        1700,
        1900,
        mode="ddp",
        devices=("cuda0", "cuda1"),
        seed=3,
        interference=BUSY,
        created_at="2026-11-29T07:02:00+00:00",
    )
    runs = load_runs(runs_dir)
    # in the page's order: its default choice
    chosen = [r for k in compare_runs.default_selection(runs) for r in runs if r.key == k]
    c = compare(chosen, scalars=compare_runs.read_scalars(chosen, LogdirReader))
    return runs_dir, c


def test_one_list_of_warnings_in_every_rendering(warned):
    _, c = warned
    messages = [w.message for w in c.warnings]
    assert [w.key for w in c.warnings] == ["seed", "effective_mode", "busy_machine"]
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception
    # folded: one counting line, the messages in one expander
    assert [w.value for w in at.warning] == [c.warning_summary]
    assert c.warning_summary == "3 notes: 1 seeds differ, 1 not run as asked, 1 busy machine"
    assert notes_shown(at) == messages
    assert document.to_json(c)["warnings"] == messages
    assert [x for x in document.text(c) if x.startswith("warning: ")] == [
        f"warning: {m}" for m in messages
    ]
    page = report.build_html(c)
    shown = [html.unescape(m) for m in page.split('<div class="warn">')[1:]]
    assert [m.split("</div>")[0] for m in shown] == messages


def test_the_page_table_is_the_values_table(warned):
    _, c = warned
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    pd.testing.assert_frame_equal(
        at.dataframe[0].value.reset_index(drop=True), frame(c), check_dtype=False
    )


def test_figures_are_typed_and_every_rendering_reads_them(warned):
    _, c = warned
    ddp = next(r for r in c.rows if r.key == "c-ddp")
    m = ddp.figures
    assert isinstance(m, RunFigures) and isinstance(ddp.speed, Speed)
    assert isinstance(m.spread, Spread) and isinstance(m.utilisation, Utilisation)
    assert (m.mode, m.devices, m.device_count, m.throughput) == ("ddp", ["cuda0", "cuda1"], 2, 1800)
    # field names, not the table's column labels
    assert all(" " not in f.name for f in dataclasses.fields(RunFigures))
    assert ddp.speed.speedup == pytest.approx(1.8) and ddp.busy is True
    row = frame(c).set_index("run").loc["c-ddp"]
    assert row["throughput (samples/s)"] == m.throughput and row["speedup"] == ddp.speed.speedup
    assert row["machine"] == "busy" and row["noise"] == ddp.verdict == "within noise"  # one each
    doc = {r["run_id"]: r for r in document.to_json(c)["runs"]}["c-ddp"]
    assert doc["throughput"]["median"] == m.spread.median and doc["devices"] == m.devices
    assert doc["verdict"] == ddp.verdict and doc["interference"] == BUSY
    back = pd.read_csv(pd.io.common.BytesIO(table_csv(frame(c)))).set_index("run")
    assert back.loc["c-ddp", "speedup"] == pytest.approx(ddp.speed.speedup)


def test_the_baseline_and_the_tags_are_the_values(warned):
    runs_dir, c = warned
    assert c.baseline_key == "a-single" and c.baseline.is_baseline and c.throughput_tag is None
    other = compare(c.runs, "c-ddp")
    assert other.baseline.name == "c-ddp" and document.to_json(other)["baseline"] == "c-ddp"
    assert document.text(other)[0].startswith("baseline: c-ddp (c-ddp); group ddp on 2 devices")
    assert f" · baseline: {other.baseline.name}</p>" in report.build_html(other)
    # figures do not depend on the baseline; speedups do
    assert [r.figures for r in other.rows] == [r.figures for r in c.rows]
    assert other.baseline.speed.speedup == pytest.approx(1.0)
    assert run_figures(c.runs[0]) == c.rows[0].figures  # no scalars: the same summary figures


def test_no_runs_is_an_empty_comparison():
    c = compare([])
    assert isinstance(c, Comparison) and c.rows == () and c.warnings == ()
    assert list(frame(c)) and frame(c).empty


def test_foreign_logs_are_found_without_the_registry(tmp_path):
    """``available_runs`` takes the registry's records; foreign logs are the folders that hold none
    of a lab run's files."""
    from tests.helpers.derived import _foreign

    folder = _foreign(tmp_path)
    make_run(tmp_path, "lab-run")
    (tmp_path / "lab-run" / "sys").mkdir()  # a run's own samples do not make it foreign logs
    found = compare_runs.available_runs([], [], tmp_path)
    assert [r.key for r in found] == [str(folder.resolve())] and found[0].foreign


def test_views_take_process_facts_as_arguments():
    """No module of lab/views/compare asks the registry anything: the page and the CLI pass what the
    engine says (records, status.json's facts through the run folder)."""
    asked = {}
    for path in sorted((REPO_ROOT / "lab" / "views" / "compare").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "lab.engine.registry":
                asked[path.name] = {a.name for a in node.names} - {"RunRecord"}
            elif isinstance(node, ast.ImportFrom) and node.module == "lab.engine":
                asked[path.name] = {a.name for a in node.names} & {"registry", "procs"}
    assert not any(asked.values()), json.dumps({k: sorted(v) for k, v in asked.items()})
