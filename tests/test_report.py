"""lab.views.report: the standalone HTML holds the data, the warnings and plotly.js inline, and loads nothing."""
from __future__ import annotations

import re
from datetime import datetime, timezone

import numpy as np
import pytest

from lab.views import compare, report
from tests.test_compare import make_run


class S:
    """The shape of a lab.events Series (step, wall_time, value arrays)."""

    def __init__(self, values, t0=1764400000.0, every=10):
        self.value = np.asarray(values, dtype=float)
        self.step = (np.arange(len(values)) + 1) * float(every)
        self.wall_time = t0 + self.step * 0.1


@pytest.fixture
def comparison(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "one", mode="single", devices=("cpu0",), throughput=1000.0, peaks={"cpu0": 410.0},
             created_at="2026-11-29T07:00:00+00:00")
    make_run(root, "two", mode="ddp", devices=("cpu0", "cpu1"), throughput=1700.0, seed=3,
             peaks={"cpu0": 420.0, "cpu1": 380.0}, created_at="2026-11-29T07:01:00+00:00")
    runs = compare.load_runs(root)
    scalars = {
        "one": {"train/loss": S([2.0, 1.0, 0.5]), "sys/cpu_pct": S([90.0, 95.0, 99.0])},
        "two": {"train/loss": S([2.1, 1.1, 0.6]), "sys/cpu_pct": S([180.0, 190.0, 185.0])},
    }
    table = compare.compare_table(runs)
    figures = report.comparison_figures(runs, table, scalars, tag="train/loss", x="samples")
    html = report.build_html(runs=runs, table=table, warnings=compare.fairness_warnings(runs), figures=figures,
                             baseline_label="one", generated_at=datetime(2026, 11, 29, 8, 0, tzinfo=timezone.utc))
    return runs, table, figures, html


def test_html_is_standalone(comparison):
    *_, html = comparison
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    # No script is fetched from anywhere: every <script> is inline.
    assert not re.search(r"<script[^>]*\bsrc\s*=", html, re.I)
    assert not re.search(r"<link[^>]*href\s*=\s*[\"']https?:", html, re.I)
    # plotly.js itself is in the file, once.
    assert html.count("Plotly.newPlot") == 4
    assert len(re.findall(r"plotly\.js v\d", html)) == 1
    assert len(html) > 1_000_000


def test_html_holds_table_warnings_and_provenance(comparison):
    runs, table, _, html = comparison
    assert "1.7" in html  # the ddp run's speedup, formatted with 4 significant digits
    assert ">0.85<" in html  # its efficiency 1.7 / 2
    assert "peak MiB cpu1" in html
    assert "The runs differ in seed (two=3, one=0)" in html
    assert "test, box" in html  # recorded_on of each run
    assert "2026-11-29T08:00:00+00:00" in html
    assert "baseline: one" in html
    assert "Scaling efficiency" in html


def test_figures_carry_the_data(comparison):
    _, _, figures, _ = comparison
    captions = [c for c, _, _ in figures]
    assert captions[0] == "train/loss against samples seen"
    loss = figures[0][1]
    # samples seen = step x global batch (64)
    assert list(loss.data[0].x) == [640.0, 1280.0, 1920.0]
    thr = figures[1][1]
    assert list(thr.data[0].y) == [1700.0, 1000.0]
    mem = figures[2][1]
    assert [t.name for t in mem.data] == ["cpu0", "cpu1"]
    assert list(mem.data[1].y) == [380.0, None]
    sys_caption, sys_fig, note = figures[3]
    assert "sys/cpu_pct" in note
    assert len(sys_fig.data) == 2 and list(sys_fig.data[0].x) == [0.0, 1.0, 2.0]


def test_text_is_escaped(tmp_path):
    make_run(tmp_path / "r", "x")
    runs = compare.load_runs(tmp_path / "r")
    html = report.build_html(runs=runs, table=compare.compare_table(runs),
                             warnings=[compare.FairnessWarning("k", "<script>alert(1)</script>")], figures=[])
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html
