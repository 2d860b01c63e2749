"""The Compare page's run picker (lab.views.compare.picker): runs narrowed by the Logs page's regex
filter and by sweep, the selection kept across reruns, the counting line."""

from __future__ import annotations

from lab.views.compare import picker
from lab.views.compare import runs as compare_runs
from tests.helpers.compare_runs import load_runs, make_run


def _runs(tmp_path):
    for i, (name, sweep) in enumerate(
        [("old-single", "sw-old"), ("old-ddp", "sw-old"), ("new-single", "sw-new"),
         ("new-ddp", "sw-new"), ("loose-dp", None)]
    ):  # fmt: skip
        make_run(tmp_path, name, sweep_id=sweep, created_at=f"2026-11-29T07:0{i}:00+00:00")
    runs = load_runs(tmp_path)
    return runs, compare_runs.labels(runs)


def test_sweeps_newest_first_with_their_counts(tmp_path):
    runs, _ = _runs(tmp_path)
    assert picker.sweeps(runs) == ["sw-new", "sw-old"]
    assert picker.sweep_label("sw-new", runs) == "sw-new · 2 runs"
    assert picker.sweep_label(picker.ALL, runs) == "any sweep or none"


def test_regex_and_sweep_narrow_the_runs(tmp_path):
    runs, names = _runs(tmp_path)
    assert picker.matching(runs, names, "ddp") == (["new-ddp", "old-ddp"], None)  # run order
    assert picker.matching(runs, names, "ddp", "sw-old") == (["old-ddp"], None)
    assert picker.matching(runs, names, "", "sw-new") == (["new-ddp", "new-single"], None)
    assert len(picker.matching(runs, names, " ")[0]) == 5  # an empty filter: every run
    found, err = picker.matching(runs, names, "ddp(")
    assert found == [] and "not a valid regular expression" in err


def test_the_selection_stays_listed_and_loses_only_gone_runs():
    keys = ["a", "b", "c", "d"]
    assert picker.kept(["d", "gone", "a"], keys) == ["d", "a"]
    assert picker.kept(None, keys) == []
    # the filter matches b; a stays listed because it is chosen
    assert picker.offered(keys, ["b"], ["a"]) == ["a", "b"]
    assert picker.count_line(4, 1000, 10) == "4 of 1000 runs match · 10 chosen"
    assert picker.count_line(10, 10, 3) == "10 runs · 3 chosen"
