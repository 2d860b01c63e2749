"""Charts that read (lab.views.compare.bars, lab.views.interval_bars, lab.views.compare.modes): on
the real sample runs, throughput and speedup are one bar per mode and device count in the mode's
colour, each with its 95% interval as an error bar and its repeats as dots; the speedup bars are
the cards; labels wrap and are never cut; one run and 1,000 runs draw without raising."""

from __future__ import annotations

import dataclasses

import pytest

from lab.events import LogdirReader
from lab.runfolder import SAMPLE_RUNS
from lab.views.compare import bars, groups, modes
from lab.views.compare import runs as compare_runs
from lab.views.compare.comparison import compare
from lab.views.compare.headline import headline, mode_of
from lab.views.compare.scaling_curve import pooled
from lab.views.interval_bars import IntervalBar, interval_bar_figure, wrap_label
from tests.helpers.compare_runs import available_runs, load_runs, sample_sweep


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    runs = available_runs(tmp_path_factory.mktemp("empty"), SAMPLE_RUNS)
    chosen = sample_sweep(runs, "sample")  # the Compare-modes sweep: single, dp, ddp, weak ddp
    return compare(chosen, scalars=compare_runs.read_scalars(chosen, LogdirReader))


def _bars(fig):
    return [t for t in fig.data if t.type == "bar"]


def _ticks(fig) -> list[str]:
    return [x for t in _bars(fig) for x in t.x]


def test_throughput_bars_carry_each_modes_interval_and_repeats(samples):
    fig = bars.throughput_figure(samples)
    drawn = _bars(fig)
    # one trace (colour, legend entry) per mode, single first
    assert [t.name for t in drawn] == ["single", "dp", "ddp", "ddp (weak)"]
    assert [t.marker.color for t in drawn] == [modes.colour(t.name) for t in drawn]
    assert len({t.marker.color for t in drawn}) == 4
    for t in drawn:
        rows = [r for r in samples.rows if mode_of(r) == t.name]
        expect = pooled([r.figures.spread for r in rows])
        assert list(t.y) == [pytest.approx(expect.median)]
        err = t.error_y
        assert err.visible and err.symmetric is False
        assert err.array[0] == pytest.approx(expect.ci_high - expect.median)
        assert err.arrayminus[0] == pytest.approx(expect.median - expect.ci_low)
    # the repeats as dots over their bar: three for each of single, dp, ddp; none for the lone weak
    dots = {t.legendgroup: sorted(t.y) for t in fig.data if t.type == "scatter"}
    assert set(dots) == {"single", "dp", "ddp"}
    ddp = sorted(r.figures.throughput for r in samples.rows if mode_of(r) == "ddp")
    assert dots["ddp"] == pytest.approx(ddp)


def test_speedup_bars_are_the_cards(samples):
    fig = bars.speedup_figure(samples)
    cards = {(c.mode, c.devices): c for c in samples.headline}
    got = {}
    for t in _bars(fig):
        for x, y, up, down in zip(t.x, t.y, t.error_y.array, t.error_y.arrayminus):
            got[x] = (t.name, y, y + up, y - down, t.marker.color)
    assert len(got) == len(cards)
    for (mode, devices), card in cards.items():
        name, y, high, low, colour = got[wrap_label(bars.group_label(mode, devices))]
        assert (name, colour) == (mode, modes.colour(mode))
        assert (y, low, high) == pytest.approx((card.speedup, card.ci_low, card.ci_high))
    assert fig.layout.shapes[0].y0 == 1.0  # the baseline's line


def test_labels_wrap_and_are_never_cut(samples):
    fig = bars.throughput_figure(samples)
    assert [x.replace("<br>", " ") for x in _ticks(fig)] == [
        b.label for b in bars.throughput_bars(samples)
    ]
    assert fig.layout.xaxis.automargin and fig.layout.yaxis.automargin
    long = "sample-ddp-" + "very-long-name-" * 12 + "r1 (20261129-151558-ddp-sample-ddp-r1-afde)"
    wrapped = wrap_label(long)
    lines = wrapped.split("<br>")
    assert "".join(lines).replace(" ", "") == long.replace(" ", "")  # no character dropped
    assert len(lines) > 5 and max(len(line) for line in lines) <= 18
    assert wrap_label("x" * 40) == "x" * 40  # an unbreakable word stays whole
    assert wrap_label("") == ""


def test_card_marker_is_the_charts_colour():
    assert modes.colour("ddp") in modes.marker("ddp") and modes.marker("ddp").endswith(" ddp")
    assert modes.colour("ddp (weak)") == modes.WEAK_COLOURS["ddp"]
    assert modes.colour(None) == modes.colour("my-script") == modes.OTHER
    assert "&lt;b&gt;" in modes.marker("<b>")


def test_one_run_draws_its_bar_and_no_speedup(tmp_path):
    from tests.helpers.compare_runs import make_run

    make_run(tmp_path / "r", "only", throughput=1234.0)
    c = compare(load_runs(tmp_path / "r"))
    thr = bars.throughput_figure(c)
    assert _ticks(thr) == ["single on 1 device"] and list(_bars(thr)[0].y) == [1234.0]
    assert list(_bars(thr)[0].error_y.array) == [None]  # no interval known: no whisker
    assert _bars(bars.speedup_figure(c)) == []


def test_a_thousand_runs_fold_into_their_modes(samples):
    rows = []
    for i in range(100):
        for r in samples.rows:
            run = dataclasses.replace(r.run, key=f"{r.run.key}#{i}")
            rows.append(dataclasses.replace(r, run=run, is_baseline=r.is_baseline and i == 0))
    base = samples.baseline
    found = groups.build(rows, groups.group_key(base.run, base.figures), 10.0)
    many = dataclasses.replace(
        samples, rows=tuple(rows), groups=found, headline=headline(rows, found)
    )
    thr, spd = bars.throughput_figure(many), bars.speedup_figure(many)
    # single (the baseline group), dp, ddp, ddp (weak); DP ran as single here: no speedup bar
    assert len(_ticks(thr)) == 4 and len(_ticks(spd)) == 2
    dots = sum(len(t.y) for t in thr.data if t.type == "scatter")
    assert dots == 1000  # every mode has repeats now, the weak one too
    assert sum(len(t.y) for t in spd.data if t.type == "scatter") == 400  # ddp and ddp (weak)


def test_interval_bars_at_any_count():
    one = interval_bar_figure([IntervalBar("a", 1.0, 0.5, 2.0, "#000", "g")], y_title="v")
    assert list(one.data[0].error_y.array) == [1.0] and list(one.data[0].error_y.arrayminus) == [
        0.5
    ]
    many = [
        IntervalBar(f"run {i}", float(i), i - 0.5, i + 0.5, "#111", f"g{i % 3}", (i, i + 1.0))
        for i in range(1000)
    ]
    fig = interval_bar_figure(many, y_title="v", reference=1.0)
    assert len(_ticks(fig)) == 1000 and len({t.name for t in _bars(fig)}) == 3
    assert list(fig.layout.xaxis.categoryarray) == [f"run {i}" for i in range(1000)]
    nan = interval_bar_figure([IntervalBar("x", float("nan"), None, 3.0, "#000", "g")], y_title="v")
    assert list(nan.data[0].y) == [None] and list(nan.data[0].error_y.array) == [None]
