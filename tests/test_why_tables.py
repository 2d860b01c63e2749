"""The Compare page's tables beside the anatomy: each profiled run's collectives, and a knob sweep's
values side by side, from the ``Comparison`` (real run folders: copies of the shipped sample runs,
and the knob-sweep runs tests/test_sweep_vary.py builds)."""

from __future__ import annotations

import json
import shutil

import pytest

from lab.runfolder import SAMPLE_RUNS
from lab.views.compare import why_tables
from lab.views.compare.comparison import compare
from tests.helpers.compare_runs import load_runs
from tests.helpers.sweep_vary import _varied_run

MOVED = {"op": "all_reduce", "rank": 0, "calls": 2.0, "bytes": 24_360.0, "total_ms": 0.8,
         "algbw_gbps": 0.0304, "busbw_gbps": 0.0304}  # fmt: skip


def test_collectives_are_listed_per_run_rank_and_kind(tmp_path):
    # one profiled DDP sample run, alone: other sample runs recorded their own collectives
    src = next(d for d in sorted(SAMPLE_RUNS.iterdir())
               if (d / "profile" / "breakdown.json").is_file() and "-ddp-" in d.name)  # fmt: skip
    root = tmp_path / "runs"
    ddp = root / src.name
    shutil.copytree(src, ddp)
    data = json.loads((ddp / "profile" / "breakdown.json").read_text())
    data["collectives"] = [MOVED, dict(MOVED, rank=1)]
    (ddp / "profile" / "breakdown.json").write_text(json.dumps(data))
    c = compare(load_runs(root))
    t = why_tables.collectives_frame(c)
    assert list(t["rank"]) == [0, 1] and set(t["op"]) == {"all_reduce"}
    assert t["MiB"][0] == pytest.approx(24_360 / 2**20, abs=1e-3)
    assert t["busbw GB/s"][0] == pytest.approx(0.0304)
    (ddp / "profile" / "breakdown.json").write_text(json.dumps({**data, "collectives": []}))
    assert why_tables.collectives_frame(compare(load_runs(root))) is None


def test_a_knob_sweeps_values_stand_side_by_side(tmp_path):
    root = tmp_path / "runs"
    at = "2026-11-29T07:0{}:00+00:00"
    for i, (v, median) in enumerate([(1.0, 1000), (25.0, 1500), (1.0, 1010), (25.0, 1490)]):
        _varied_run(
            root, f"r{i}-b{v:g}", median, {"bucket-cap-mb": v}, mode="ddp",
            devices=("cpu:0", "cpu:1"), created_at=at.format(i), seed=0,
        )  # fmt: skip
    t = why_tables.by_value_frame(compare(load_runs(root)))
    assert list(t["value"]) == [1.0, 25.0] and list(t["runs"]) == [2, 2]
    # the first value is the baseline group; 2 runs against 2: the range of the pairs, 67%, too
    # little for a verdict however far from 1.0 (verdict.LEVEL)
    assert t["speedup"][0].startswith("1.00 (")
    assert list(t["verdict"]) == ["baseline", "within noise"]
    assert t["speedup"][0].endswith("the baseline's own range over 2 runs)")
    assert (
        t["speedup"][1]
        == f"{1495 / 1005:.2f} ({1490 / 1010:.2f}–{1500 / 1000:.2f}, range of 2×2 pairs, 67%; "
        "too few runs for a verdict: repeat each side at least 3 times)"
    )
    assert why_tables.by_value_frame(compare(load_runs(SAMPLE_RUNS, sample=True))) is None
