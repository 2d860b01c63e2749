"""An fsdp run on Compare and the link check: the anatomy's communication bar split into
all-gathers in forward and backward and reduce-scatters (lab.views.compare.anatomy), its
reading, the link share of each kind against a check that timed the model's unit sizes
(lab.views.compare.linkshare), and those sizes on Home and in ``lab linkcheck``
(lab.views.linkcheck, lab.engine.linkcheck). breakdown.json files and link checks are written
in the contract's shape with known numbers; nothing is run."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lab.engine import linkcheck
from lab.runfolder import LINKCHECKS_DIR, write_json_atomic
from lab.views import linkcheck as shown
from lab.views.compare import anatomy, linkshare
from tests.helpers.anatomy import DDP, ZERO

SPLIT = {
    "comm_all_gather_fwd_exposed": 7.0,
    "comm_all_gather_fwd_hidden": 0.5,
    "comm_all_gather_bwd_exposed": 4.0,
    "comm_all_gather_bwd_hidden": 1.0,
    "comm_reduce_scatter_exposed": 20.0,
    "comm_reduce_scatter_hidden": 0.0,
}
FSDP = {
    **ZERO,
    "data": 0.2,
    "forward": 15.0,
    "backward": 33.0,
    "optimizer": 1.0,
    "other": 0.8,
    "comm_total": 33.0,
    "comm_exposed": 31.5,  # 0.5 ms of it a logging step's all-reduce, waited for
    **SPLIT,
}  # step 50.0


def fsdp_breakdown(**per_rank) -> dict:
    return {
        "step_ms": 50.0,
        "phases_ms": FSDP,
        "per_rank": per_rank.get("ranks") or [{"rank": 0, "step_ms": 50.0, "phases_ms": FSDP}],
        "effective_mode": "fsdp",
        "world_size": 2,
        "note": None,
    }


def test_the_communication_bar_of_an_fsdp_run_is_split_by_kind():
    (step, comm) = anatomy.run_bars("fsdp", fsdp_breakdown())
    assert step.kind == "step" and comm.kind == "comm"
    # the rest of comm (the all-reduce) keeps the plain segments
    assert comm.ms == pytest.approx({**SPLIT, "comm_exposed": 0.5, "comm_hidden": 0.0})
    assert sum(comm.ms.values()) == pytest.approx(FSDP["comm_total"])
    # a DDP run's bar is as it was; a breakdown written before the split has none either
    assert anatomy.split_segments(DDP) is None
    assert anatomy.run_bars("ddp", {"phases_ms": DDP, "step_ms": 6.0})[1].ms == pytest.approx(
        {"comm_exposed": 3.1, "comm_hidden": 1.0}
    )


def test_the_figure_draws_each_kind_in_its_colour_hidden_hatched():
    fig = anatomy.figure([("fsdp", fsdp_breakdown()), ("ddp", {"phases_ms": DDP, "step_ms": 6.0})])
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["all-gather in forward, waited for"].y) == [
        "fsdp",
        "fsdp · communication",
        "ddp",
        "ddp · communication",
    ]
    assert list(by_name["reduce-scatter, waited for"].x) == [None, 20.0, None, None]
    assert list(by_name["communication, waited for"].x) == [None, 0.5, None, 3.1]
    assert by_name["all-gather in backward, hidden"].marker.pattern.shape == "/"
    seg = anatomy.SEGMENTS["comm_all_gather_bwd_hidden"]
    assert (
        by_name[seg.name].marker.line.color
        == anatomy.SEGMENTS["comm_all_gather_bwd_exposed"].colour
    )
    assert "reduce-scatter, hidden" not in by_name  # zero in every row: left out


def test_the_reading_names_each_kind_with_the_runs_numbers():
    (line,) = anatomy.explain([("fsdp x2", fsdp_breakdown())])
    assert line == (
        "**fsdp x2** (FSDP, 2 ranks) waits 7.0 ms on all-gathers in forward, 4.0 ms on "
        "all-gathers in backward and 20.0 ms on reduce-scatters per step, 63% of its 50.0 ms "
        "step (with 0.5 ms on other collectives); another 1.5 ms of its communication ran "
        "hidden behind computation."
    )
    slow = {"rank": 1, "step_ms": 60.0, "phases_ms": {**FSDP, "comm_exposed": 10.0}}
    fast = {"rank": 0, "step_ms": 50.0, "phases_ms": FSDP}
    (line,) = anatomy.explain([("fsdp", fsdp_breakdown(ranks=[fast, slow]))])
    assert "at every all-gather and reduce-scatter: its bar is drawn beside" in line


def _check(root, check_id: str, **kinds) -> None:
    def rows(pairs):
        return [
            {"bytes": b, "time_ms": 1.0, "algbw_gbps": 2 * bw, "busbw_gbps": bw} for b, bw in pairs
        ]

    rec = {
        "id": check_id,
        "backend": "gloo",
        "world_size": 2,
        "gpus": [],
        "results": rows([(2**20, 1.0)]),
        **{op: rows(pairs) for op, pairs in kinds.items()},
    }
    (root / LINKCHECKS_DIR).mkdir(exist_ok=True)
    write_json_atomic(root / LINKCHECKS_DIR / f"{check_id}.json", rec)


def _fsdp_row(root, name="fsdp"):
    rows = [
        {"op": op, "rank": "min", "calls": calls, "bytes": nbytes, "busbw_gbps": busbw}
        for op, calls, nbytes, busbw in (
            ("all_gather", 4.0, 48_720, 0.005),
            ("reduce_scatter", 2.0, 24_360, 0.002),
        )
    ]
    run = SimpleNamespace(
        summary={"backend": "gloo"},
        run_dir=str(root / name),
        option=lambda k: {"model": "tinycnn"}.get(k),
    )
    figures = SimpleNamespace(profile={"collectives_min": rows}, world_size=2, devices=["cpu0"])
    return SimpleNamespace(name=name, run=run, figures=figures)


def test_link_share_of_each_kind_against_the_models_sizes(tmp_path):
    _check(tmp_path, "20260101-000000-gloo-2-aaaa")  # all-reduces only: nothing for fsdp
    c = SimpleNamespace(rows=(_fsdp_row(tmp_path),))
    assert linkshare.lines(c) == [
        "fsdp: no link check of the same GPUs, one node and the same NCCL variables that timed "
        "all-gathers and reduce-scatters to compare them with (lab linkcheck --model tinycnn on "
        "those GPUs, with the run's NCCL variables)"
    ]
    _check(
        tmp_path,
        "20260102-000000-gloo-2-bbbb",
        all_gather=[(5160, 0.01), (19200, 0.02)],
        reduce_scatter=[(5160, 0.004), (19200, 0.008)],
    )
    # 12,180 bytes a call, nearest 19,200 in log scale (ratio 1.58 against 2.36)
    assert linkshare.lines(c) == [
        "fsdp: all-gather at 0.005 GB/s bus bandwidth (12 KiB a call), 25% of the 0.02 GB/s the "
        "link check 20260102-000000-gloo-2-bbbb reached at 19 KiB",
        "fsdp: reduce-scatter at 0.002 GB/s bus bandwidth (12 KiB a call), 25% of the 0.008 GB/s "
        "the link check 20260102-000000-gloo-2-bbbb reached at 19 KiB",
    ]


def test_home_shows_the_models_sizes_a_table_each():
    rec = {
        "model": "tinycnn",
        "units": [{"name": "features", "bytes": 19200}, {"name": "head", "bytes": 5160}],
        "results": [],
        "all_gather": [
            {
                "bytes": 19200,
                "time_ms": 0.4,
                "max_time_ms": 0.5,
                "algbw_gbps": 0.048,
                "busbw_gbps": 0.024,
            },
        ],
        "reduce_scatter": [],
    }
    [(heading, rows)] = shown.tables(rec)
    assert heading == "All-gather, the fsdp units of tinycnn (2 units, 1 sizes)"
    assert rows == [
        {
            "bytes": 19200,
            "time_ms": 0.4,
            "slowest rank (ms)": 0.5,
            "algbw (GB/s)": 0.048,
            "busbw (GB/s)": 0.024,
        },
    ]
    assert shown.tables({"results": [], "model": None}) == []
    assert linkcheck.rows_of(None, "all_gather") == [] and linkcheck.OPS[0] == "all_reduce"


def test_an_unknown_model_is_refused_in_one_line_before_anything_starts(capsys, tmp_path):
    from lab.cli import main

    with pytest.raises(linkcheck.LinkCheckError, match="--model: unknown model 'tinycnnn'"):
        linkcheck.model_of("tinycnnn")
    assert linkcheck.model_of("") is None and linkcheck.model_of("tinycnn") == "tinycnn"
    assert main(["linkcheck", "--nproc", "2", "--model", "tinycnnn"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did you mean tinycnn" in err[0]
    logs = tmp_path / "x.torchrun"
    argv = linkcheck._command(
        linkcheck.Plan("gloo", 2, ()), tmp_path / "x", logs, 1024, None, "tinycnn"
    )
    assert argv[-2:] == ["--model", "tinycnn"] and argv[argv.index("--log-dir") + 1] == str(logs)
