"""lab.views.compare.anatomy (breakdown.json to bars, the straggler, the traces, the figure and its
reading) and the anatomy chart of lab.views.compare.curves, on breakdown.json files written in the
contract's shape with known numbers.

The bars are checked exactly against the file: the phases add up to the step, DataParallel's
scatter, replicate and gather are carved out of forward, communication is split into waited-for and
hidden, and the slowest rank is drawn beside only when the ranks differ by over 10%. The figure is
read back from plotly: one row per bar, one colour per segment whichever run it is in."""

from __future__ import annotations

import json

import pytest

from lab.views.compare import anatomy
from lab.views.compare import curves as compare_curves
from lab.views.compare.comparison import compare
from tests.helpers.anatomy import DDP, ZERO, write_breakdown
from tests.helpers.compare_runs import load_runs, make_run


def profiles(runs):
    """``(name, breakdown.json or None)`` per run, as the Comparison holds them for the bars."""
    return compare(runs).profiles


def rank(r: int, step: float, **changes) -> dict:
    return {"rank": r, "step_ms": step, "phases_ms": {**DDP, **changes}}


@pytest.fixture
def profiled(tmp_path):
    """single, DP over two GPUs and a DDP run with a straggling rank 1, all profiled, plus one run
    that is not."""
    root = tmp_path / "runs"
    d = make_run(root, "a-single", created_at="2026-11-29T07:00:00+00:00")
    write_breakdown(
        d,
        mode="single",
        world=1,
        step=10.0,
        phases={
            **ZERO,
            "data": 0.5,
            "forward": 3.0,
            "backward": 5.5,
            "optimizer": 0.6,
            "other": 0.4,
        },
    )
    d = make_run(
        root, "b-dp", mode="dp", devices=("cuda0", "cuda1"), created_at="2026-11-29T07:01:00+00:00"
    )
    write_breakdown(
        d,
        mode="dp",
        world=2,
        step=9.0,
        phases={
            **ZERO,
            "data": 0.5,
            "forward": 5.0,
            "dp_scatter": 0.8,
            "dp_replicate": 1.5,
            "dp_gather": 0.6,
            "backward": 2.8,
            "optimizer": 0.4,
            "other": 0.3,
            "comm_total": 2.0,
            "comm_exposed": 1.2,
        },
    )
    d = make_run(
        root,
        "c-ddp",
        mode="ddp",
        devices=("cuda0", "cuda1"),
        created_at="2026-11-29T07:02:00+00:00",
    )
    # rank 0 computes 6.0 - 3.6 = 2.4 ms, rank 1 6.0 - 1.0 = 5.0 ms: rank 1 straggles, rank 0 waits
    # for it
    write_breakdown(
        d,
        mode="ddp",
        world=2,
        step=6.0,
        phases=DDP,
        traces=2,
        per_rank=[rank(0, 6.0, comm_exposed=3.6), rank(1, 6.0, comm_exposed=1.0, backward=5.3)],
    )
    make_run(root, "d-plain", created_at="2026-11-29T07:03:00+00:00")
    return sorted(load_runs(root), key=lambda r: r.run_id)


def test_bars_hold_the_breakdown_exactly(profiled):
    single, dp, ddp, plain = profiled
    data = anatomy.breakdown(ddp.run_dir, ddp.summary)
    assert data["step_ms"] == 6.0 and anatomy.breakdown(plain.run_dir, plain.summary) is None
    step, comm, slowest = anatomy.run_bars(ddp.key, data)
    assert (step.kind, comm.kind, slowest.kind, slowest.rank) == ("step", "comm", "slowest", 1)
    assert step.ms == pytest.approx(
        {
            "data": 0.08,
            "forward": 0.87,
            "dp_scatter": 0,
            "dp_replicate": 0,
            "dp_gather": 0,
            "backward": 4.69,
            "optimizer": 0.2,
            "other": 0.16,
        }
    )
    assert sum(step.ms.values()) == pytest.approx(6.0)  # the phases add up to the step
    assert comm.ms == pytest.approx({"comm_exposed": 3.1, "comm_hidden": 1.0})
    assert slowest.ms["backward"] == 5.3
    dp_step, dp_comm = anatomy.run_bars(dp.key, anatomy.breakdown(dp.run_dir, dp.summary))
    # scatter, replicate and gather carved out
    assert dp_step.ms["forward"] == pytest.approx(5.0 - 2.9)
    assert (dp_step.ms["dp_scatter"], dp_step.ms["dp_replicate"], dp_step.ms["dp_gather"]) == (
        0.8,
        1.5,
        0.6,
    )
    assert sum(dp_step.ms.values()) == pytest.approx(9.0)
    assert dp_comm.ms == pytest.approx({"comm_exposed": 1.2, "comm_hidden": 0.8})
    only = anatomy.run_bars(single.key, anatomy.breakdown(single.run_dir, single.summary))
    assert [b.kind for b in only] == ["step"]  # no communication, one rank
    assert anatomy.comm_share(anatomy.breakdown(ddp.run_dir)) == pytest.approx(100 * 3.1 / 6.0)
    assert anatomy.comm_share(None) is None


def test_straggler_only_over_ten_percent():
    # 3.0 vs 3.2 ms: 6.7%
    even = {"per_rank": [rank(0, 6.0, comm_exposed=3.0), rank(1, 6.0, comm_exposed=2.8)]}
    assert anatomy.straggler(even) is None
    slow, fast, spread = anatomy.straggler(
        {"per_rank": [rank(0, 6.0, comm_exposed=3.0), rank(1, 6.0, comm_exposed=2.6)]}
    )
    assert (slow["rank"], fast["rank"], spread) == (1, 0, pytest.approx(3.4 / 3.0 - 1))
    assert anatomy.straggler({"per_rank": [rank(0, 6.0)]}) is None


def test_breakdown_found_without_summary_and_not_outside_the_run(tmp_path):
    d = make_run(tmp_path, "live", summary=False)
    # a run still going: no profile key yet
    (d / "summary.json").write_text(json.dumps({"mode": "ddp"}))
    write_breakdown(d, mode="ddp", world=2, step=6.0, phases=DDP, pointer=None, traces=2)
    assert anatomy.breakdown(d)["effective_mode"] == "ddp"
    assert [(r, p.name) for r, p in anatomy.trace_files(d)] == [
        (0, "trace_rank0.json.gz"),
        (1, "trace_rank1.json.gz"),
    ]
    assert anatomy.trace_downloads(d, "live")[1] == (
        "rank 1 trace",
        "live-trace_rank1.json.gz",
        d / "profile" / "trace_rank1.json.gz",
    )
    assert anatomy.breakdown(d, {"profile": {"breakdown": "../../etc/passwd"}}) is None
    (d / "profile" / "breakdown.json").write_text("{torn")
    assert anatomy.breakdown(d) is None
    (d / "profile" / "breakdown.json").write_text(json.dumps({"step_ms": 0, "phases_ms": {}}))
    assert anatomy.breakdown(d) is None  # not the contract's shape: no bars rather than a crash
    assert anatomy.trace_files(tmp_path / "nothing") == []


def test_memory_snapshots_offered_per_rank_named_after_the_run(tmp_path):
    d = tmp_path / "r1"
    assert anatomy.snapshot_downloads(d, "r1") == []  # no profile folder yet
    (d / "profile").mkdir(parents=True)
    for name in ("memory_snapshot_rank1.pickle", "memory_snapshot_rank0.pickle", "x.pickle"):
        (d / "profile" / name).write_bytes(b"p")
    assert anatomy.snapshot_downloads(d, "r1") == [
        (
            "rank 0 memory",
            "r1-memory_snapshot_rank0.pickle",
            d / "profile/memory_snapshot_rank0.pickle",
        ),
        (
            "rank 1 memory",
            "r1-memory_snapshot_rank1.pickle",
            d / "profile/memory_snapshot_rank1.pickle",
        ),
    ]


def test_figure_rows_and_one_colour_per_segment(profiled):
    fig = anatomy.figure(profiles(profiled))
    rows = [
        "a-single",
        "b-dp",
        "b-dp · communication",
        "c-ddp",
        "c-ddp · communication",
        "c-ddp · rank 1 (slowest)",
    ]
    by_name = {t.name: t for t in fig.data}
    for t in fig.data:
        assert list(t.y) == rows and t.orientation == "h"
    assert fig.layout.barmode == "stack"
    # a communication row has none
    assert list(by_name["backward"].x) == [5.5, 2.8, None, 4.69, None, 5.3]
    assert list(by_name["communication, waited for"].x)[4] == pytest.approx(3.1)
    assert by_name["communication, hidden"].marker.pattern.shape == "/"
    colours = {t.name: t.marker.color for t in fig.data if t.name != "communication, hidden"}
    drawn = {k: s for k, s in anatomy.SEGMENTS.items() if k not in anatomy.SPLIT_KEYS}  # no fsdp
    assert colours == {s.name: s.colour for k, s in drawn.items() if k != "comm_hidden"}
    assert anatomy.figure(profiles(profiled[3:])) is None  # nothing profiled: no figure


def test_reading_uses_each_runs_own_numbers(profiled):
    lines = anatomy.explain(profiles(profiled))
    assert lines[0].startswith(
        "**a-single** communicates nothing: of its 10.0 ms step, forward takes 3.0 ms"
    )
    assert (
        "**b-dp** (DataParallel over 2 devices) spends 0.8 ms per step scattering the batch, 1.5 "
        "ms "
        "replicating the model and 0.6 ms gathering the outputs on device 0: 32% of its 9.0 ms step"
    ) in lines[1]
    assert lines[2].startswith(
        "**c-ddp** (DDP, 2 ranks) waits 3.1 ms per step on all-reduce, 52% of its 6.0 ms "
        "step; another 1.0 ms of all-reduce ran hidden behind backward."
    )
    assert "rank 1 computes 5.0 ms per step against 2.4 ms on rank 0 (108% longer)" in lines[2]
    assert lines[3] == anatomy.NOT_PROFILED.format(names="d-plain")
    caption, fig, note = compare_curves.anatomy_figures(compare(profiled))[0]
    assert caption == anatomy.CAPTION and note.startswith(anatomy.INTRO) and lines[2] in note
    assert compare_curves.anatomy_figures(compare(profiled[3:])) == []


def test_a_dp_run_that_fell_back_says_so(tmp_path):
    d = make_run(tmp_path, "dp", mode="dp", effective_mode="single", devices=("cpu0",))
    write_breakdown(
        d,
        mode="single",
        world=1,
        step=4.0,
        note="DataParallel fell back to one device "
        "(DataParallel needs at least two GPUs; 0 visible): no scatter/replicate/gather",
        phases={
            **ZERO,
            "data": 0.1,
            "forward": 1.0,
            "backward": 2.5,
            "optimizer": 0.2,
            "other": 0.2,
        },
    )
    [line] = anatomy.explain(profiles(load_runs(tmp_path)))
    assert line.endswith(
        "(DataParallel fell back to one device (DataParallel needs at least two GPUs; 0 visible): "
        "no scatter/replicate/gather)."
    )
