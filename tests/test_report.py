"""lab.views.compare.report: the standalone HTML holds the runs, the table as formatted, the
warnings and the figures that were put in (read back from the embedded plotly JSON), plotly.js
inline once, and loads nothing."""

from __future__ import annotations

import base64
import dataclasses
import html as html_lib
import json
import re
from datetime import datetime, timezone

import numpy as np
import pytest

from lab.views.compare import curves as compare_curves
from lab.views.compare import fairness, report
from lab.views.compare.comparison import compare
from lab.views.compare.table import frame
from tests.helpers.compare_runs import load_runs, make_run


class S:
    """The shape of a lab.events Series (step, wall_time, value arrays)."""

    def __init__(self, values, t0=1764400000.0, every=10):
        self.value = np.asarray(values, dtype=float)
        self.step = (np.arange(len(values)) + 1) * float(every)
        self.wall_time = t0 + self.step * 0.1


@pytest.fixture
def comparison(tmp_path):
    root = tmp_path / "runs"
    make_run(
        root,
        "one",
        mode="single",
        devices=("cpu0",),
        throughput=1000.0,
        peaks={"cpu0": 410.0},
        created_at="2026-11-29T07:00:00+00:00",
    )
    make_run(
        root,
        "two",
        mode="ddp",
        devices=("cpu0", "cpu1"),
        throughput=1700.0,
        seed=3,
        peaks={"cpu0": 420.0, "cpu1": 380.0},
        created_at="2026-11-29T07:01:00+00:00",
    )
    runs = load_runs(root)
    scalars = {
        "one": {"train/loss": S([2.0, 1.0, 0.5]), "sys/cpu_pct": S([90.0, 95.0, 99.0])},
        "two": {"train/loss": S([2.1, 1.1, 0.6]), "sys/cpu_pct": S([180.0, 190.0, 185.0])},
    }
    c = compare(runs)  # the baseline: "one"
    table = frame(c)
    figures = compare_curves.comparison_figures(c, scalars, tag="train/loss", x="samples")
    html = report.build_html(
        c, figures, generated_at=datetime(2026, 11, 29, 8, 0, tzinfo=timezone.utc)
    )
    return runs, table, figures, html


def _array(v):
    """A data array as plotly's JSON writes it: a list, or a typed array {"dtype", "bdata"}."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).tolist()
    return list(v)


def embedded_figures(html: str) -> list[tuple[list, dict]]:
    """``(data, layout)`` of every ``Plotly.newPlot`` call in the page, parsed as JSON."""
    dec = json.JSONDecoder()
    out = []
    for m in re.finditer(r'Plotly\.newPlot\(\s*"[^"]+",\s*', html):
        data, end = dec.raw_decode(html, m.end())
        layout, _ = dec.raw_decode(html, re.compile(r",\s*").match(html, end).end())
        out.append((data, layout))
    return out


def table_cells(html: str) -> list[list[str]]:
    """The exported table as rows of cell texts (header row first)."""
    body = html[html.index("<h2>Table</h2>") :]
    body = body[: body.index("</table>")]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)
    return [
        [html_lib.unescape(c.strip()) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r, re.S)]
        for r in rows
    ]


def test_html_is_standalone(comparison):
    *_, html = comparison
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    # No script is fetched from anywhere: every <script> is inline.
    assert not re.search(r"<script[^>]*\bsrc\s*=", html, re.I)
    assert not re.search(r"<link[^>]*href\s*=\s*[\"']https?:", html, re.I)
    # plotly.js itself is in the file, once, and every figure is drawn with it.
    assert len(re.findall(r"plotly\.js v\d", html)) == 1
    assert len(embedded_figures(html)) == 5


def test_html_table_holds_the_figures_as_formatted(comparison):
    _, table, _, html = comparison
    header, *rows = table_cells(html)
    assert header == list(table.columns)
    by_run = {r[0]: dict(zip(header, r)) for r in rows}
    assert set(by_run) == {"one", "two"}
    two = by_run["two"]
    assert two["speedup"] == "1.7" and two["efficiency"] == "0.85"  # 1700/1000, then / 2 devices
    assert two["peak MiB cpu1"] == "380" and two["memory imbalance"] == "0.1"  # (420-380)/400
    assert by_run["one"]["speedup"] == "1" and by_run["one"]["peak MiB cpu1"] == "–"


def test_html_holds_runs_warnings_and_provenance(comparison):
    *_, html = comparison
    assert (
        "<li><b>one</b> (one): recorded 2026-11-29T07:00:00+00:00 on test, box, state "
        "succeeded</li>" in html
    )
    assert "<li><b>two</b> (two):" in html
    assert '<div class="warn">The runs differ in seed (3: two; 0: one)' in html
    assert "Generated 2026-11-29T08:00:00+00:00 · baseline: one" in html
    # the texts, as HTML
    assert "<b>Scaling efficiency</b>" in html and "<i>samples seen</i>" in html


def test_html_embeds_the_figures_that_were_put_in(comparison):
    *_, figures, html = comparison
    embedded = embedded_figures(html)
    for caption, _, _ in figures:
        assert f"<h2>{html_lib.escape(caption)}</h2>" in html
    (loss, loss_layout), (thr, _), (spd, _), (mem, _), (sysd, _) = embedded
    assert [t["name"] for t in loss] == ["two", "one"]
    assert _array(loss[1]["x"]) == [640.0, 1280.0, 1920.0] and _array(loss[1]["y"]) == [
        2.0,
        1.0,
        0.5,
    ]
    assert loss_layout["xaxis"]["title"]["text"] == "samples seen"
    # a bar per mode, single first, in the modes' colours
    assert [(t["name"], _array(t["x"]), _array(t["y"])) for t in thr] == [
        ("single", ["single on 1 device"], [1000.0]),
        ("ddp", ["ddp on 2 devices"], [1700.0]),
    ]
    assert [(t["name"], _array(t["y"])) for t in spd] == [("ddp", [1.7])]
    assert [t["name"] for t in mem] == ["cpu0", "cpu1"] and _array(mem[1]["y"]) == [380.0, None]
    assert [t["name"] for t in sysd] == ["cpu (process tree)"] * 2
    assert _array(sysd[0]["y"]) == [180.0, 190.0, 185.0] and _array(sysd[1]["y"]) == [
        90.0,
        95.0,
        99.0,
    ]


def test_figures_carry_the_data(comparison):
    _, _, figures, _ = comparison
    captions = [c for c, _, _ in figures]
    assert captions == [
        "train/loss against samples seen",
        "Throughput by mode",
        "Speedup by mode",
        "Peak memory per device",
        "Utilisation over time, run by run",
    ]
    loss = figures[0][1]
    # samples seen = step x global batch (64)
    assert list(loss.data[0].x) == [640.0, 1280.0, 1920.0]
    thr = figures[1][1]
    assert [list(t.y) for t in thr.data] == [[1000.0], [1700.0]]
    assert list(figures[2][1].data[0].y) == [1.7]
    mem = figures[3][1]
    assert [t.name for t in mem.data] == ["cpu0", "cpu1"]
    assert list(mem.data[1].y) == [380.0, None]
    sys_caption, sys_fig, note = figures[4]
    assert "sys/cpu_pct" in note
    assert len(sys_fig.data) == 2 and list(sys_fig.data[0].x) == [0.0, 1.0, 2.0]


def test_text_is_escaped(tmp_path):
    make_run(tmp_path / "r", "x")
    runs = load_runs(tmp_path / "r")
    warned = (fairness.FairnessWarning("k", "<script>alert(1)</script>"),)
    html = report.build_html(dataclasses.replace(compare(runs), warnings=warned))
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html


def test_html_holds_the_anatomy_bars_and_their_reading(tmp_path):
    """The page passes the anatomy figure first; the export draws its bars and prints its reading
    under it."""
    from tests.helpers.anatomy import DDP, write_breakdown

    d = make_run(tmp_path / "r", "ddp", mode="ddp", devices=("cpu0", "cpu1"))
    write_breakdown(d, mode="ddp", world=2, step=6.0, phases=DDP)
    c = compare(load_runs(tmp_path / "r"))
    html = report.build_html(c, compare_curves.anatomy_figures(c))
    [(bars, _)] = embedded_figures(html)
    assert {t["name"] for t in bars} >= {"forward", "backward", "communication, waited for"}
    assert next(_array(t["x"]) for t in bars if t["name"] == "backward") == [4.69, None]
    assert "<h2>Anatomy of a step</h2>" in html
    assert (
        "<b>ddp</b> (DDP, 2 ranks) waits 3.1 ms per step on all-reduce, 52% of its 6.0 ms step"
        in html
    )
    # the scaling text is part of "How to read this"
    assert "<b>Strong or weak scaling.</b>" in html
