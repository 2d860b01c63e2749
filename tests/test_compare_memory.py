"""lab/views/compare/memory.py: Compare's estimate-against-measured table, from summary.json's
``memory`` of run folders made in the contract's shape (``make_run`` of
tests/helpers/compare_runs.py)."""

from __future__ import annotations

import json

import pytest

from lab.views.compare import memory
from tests.helpers.compare_runs import load_run, make_run


def _with_memory(d, mem) -> None:
    s = json.loads((d / "summary.json").read_text())
    s["memory"] = mem
    (d / "summary.json").write_text(json.dumps(s))


DP = {
    "estimate_mib": {
        "cuda1": {"parameters": 40.0, "gradients": 40.0, "activations": 20.0, "total": 100.0},
        "cuda0": {
            "parameters": 40.0,
            "gradients": 40.0,
            "optimizer": 40.0,
            "activations": 20.0,
            "replica_gradients": 40.0,
            "input_batch": 6.0,
            "gathered_outputs": 0.5,
            "loss": 0.0,
            "total": 186.5,
        },
    },
    "peak_mib": {"cuda0": 200.0, "cuda1": 90.0},
    "baseline_mib": {"cuda0": 0.0, "cuda1": 0.0},
}
CPU = {
    "estimate_mib": {"cpu0": {"parameters": 1.0, "activations": 9.0, "total": 10.0}},
    "peak_mib": {"cpu0": 780.0},
    "baseline_mib": {"cpu0": 755.0},
}


def test_each_device_s_estimate_beside_what_was_measured(tmp_path):
    dp = make_run(tmp_path, "dp", mode="dp", devices=("cuda0", "cuda1"))
    cpu = make_run(tmp_path, "cpu", devices=("cpu0",))
    old = make_run(tmp_path, "old")  # no memory: an older run, no rows
    _with_memory(dp, DP)
    _with_memory(cpu, CPU)
    runs = [load_run(d) for d in (dp, cpu, old)]
    names = {r.key: r.key.upper() for r in runs}
    table = memory.frame(runs, names)
    assert list(table.columns) == list(memory.COLUMNS)
    assert [tuple(x) for x in table[["run", "device"]].values] == [
        ("DP", "cuda0"),
        ("DP", "cuda1"),
        ("CPU", "cpu0"),
    ]
    first = table.iloc[0]
    assert first["estimate MiB"] == 186.5 and first["measured MiB"] == 200.0
    assert first["measured / estimate"] == pytest.approx(1.07, abs=0.01)
    assert "replicas' gradients (DP) 40.0" in first["parts"] and "loss" not in first["parts"]
    assert "optimizer state" not in table.iloc[1]["parts"]
    # the CPU's measured figure is the rise over the baseline, not the whole resident set
    assert table.iloc[2]["measured MiB"] == 25.0 and table.iloc[2]["measured / estimate"] == 2.5


def test_no_table_without_memory_and_damaged_entries_are_skipped(tmp_path):
    assert memory.frame([load_run(make_run(tmp_path, "a"))], {}) is None
    rows = memory.run_rows("x", {"memory": {"estimate_mib": {"cpu0": {"total": "?"}}}})
    assert rows == []
    rows = memory.run_rows("x", {"memory": {"estimate_mib": {"cpu0": {"total": 5.0}}}})
    assert rows[0].measured_mib is None and rows[0].ratio is None
