"""lab.views.logs.run_select: the run regex, experiments, the selection kept across reruns, and rows
of the table."""

from __future__ import annotations

from lab.views.logs import run_select as rs
from tests.logs_fixtures import run_names

NAMES = run_names(10)  # exp0/lr0.001-bs32-s0 ... 300 runs


def test_regex_matches_exactly_the_runs_a_search_finds():
    got, err = rs.match_runs(NAMES, "^exp3/")
    assert err is None and len(got) == 30 and all(r.startswith("exp3/") for r in got)
    lr, _ = rs.match_runs(NAMES, r"lr0\.1-")
    assert len(lr) == 100 and all("lr0.1-" in r for r in lr)
    assert rs.match_runs(NAMES, "  ")[0] == NAMES
    assert rs.match_runs(NAMES, "nothing-like-this") == ([], None)
    bad, err = rs.match_runs(NAMES, "exp(3")
    assert bad == [] and "not a valid regular expression" in err and "position 3" in err


def test_count_line_and_hints():
    assert rs.count_line(30, 300, 6, 0) == "30 of 300 runs match the filter · 6 selected, 0 drawn"
    assert rs.count_line(300, 300, 6, 6) == "300 runs · 6 selected, 6 drawn"
    assert "Select all matching" in rs.nothing_drawn_hint(30, 6)
    assert "No run matches" in rs.nothing_drawn_hint(0, 6)
    assert "No run is selected" in rs.nothing_drawn_hint(30, 0)


def test_selection_survives_new_runs_and_drops_vanished_ones():
    first = rs.current(None, NAMES)
    assert first == NAMES[:6]  # the default when a folder opens
    chosen = ["exp3/lr0.1-bs32-s0", "exp5/lr0.01-bs64-s4"]
    more = sorted(NAMES + ["exp3/lr0.5-bs32-s0", "new/run"])
    assert rs.current(chosen, more) == chosen  # new runs appear, the selection stays
    assert rs.current(chosen, [n for n in NAMES if n != chosen[0]]) == chosen[1:]
    assert rs.current([], NAMES) == []  # an emptied selection stays empty, not the default


def test_shown_is_selected_and_matching():
    matching, _ = rs.match_runs(NAMES, "^exp3/")
    sel = NAMES[:6] + matching[:2]
    assert rs.shown(sel, matching) == matching[:2]
    assert rs.shown(sel, NAMES) == sel


def test_experiments_and_their_toggles():
    groups = rs.experiments(NAMES + ["top"])
    assert list(groups) == [".", *[f"exp{i}" for i in range(10)]]
    assert groups["."] == ["top"] and len(groups["exp3"]) == 30
    sel = rs.toggle(NAMES[:6], groups["exp3"], True, NAMES)
    assert (
        len(sel) == 36 and rs.group_on(sel, groups["exp3"]) and not rs.group_on(sel, groups["exp0"])
    )
    assert rs.group_label("exp0", groups["exp0"], sel) == "exp0 · 6/30"
    assert rs.group_label(".", ["top"], []) == "(top level) · 0/1"
    assert rs.toggle(sel, groups["exp3"], False, NAMES) == NAMES[:6]
    assert not rs.group_on(sel, [])


def test_table_choice_adds_and_removes_only_the_rows_changed():
    rows = [("exp0/a",), ("exp0/b",), ("k/run-0", "k/run-0/train", "k/run-0/validation")]
    names = sorted(["exp0/a", "exp0/b", "exp1/c", "k/run-0", "k/run-0/train", "k/run-0/validation"])
    sel = ["exp0/a", "exp1/c"]  # exp1/c has no row: a table click never drops it
    ticked = rs.rows_on(sel, rows)
    assert ticked == [0]
    assert rs.apply_table_choice(sel, rows, ticked, [0, 2], names) == [
        "exp0/a",
        "exp1/c",
        "k/run-0",
        "k/run-0/train",
        "k/run-0/validation",
    ]
    assert rs.apply_table_choice(sel, rows, ticked, [1], names) == ["exp0/b", "exp1/c"]
    # no table drawn: nothing changes
    assert rs.apply_table_choice(sel, rows, ticked, None, names) == sel
    # a stale index is ignored
    assert rs.apply_table_choice(sel, rows, ticked, [0, 99], names) == sel


def test_after_table_reads_the_state_streamlit_keeps():
    rows = [("a",), ("b",)]
    drawn = {"folder": "/x", "rows": rows, "ticked": [0]}
    state = {"selection": {"rows": [0, 1], "columns": [], "cells": []}}
    assert rs.after_table(["a"], drawn, "/x", state, ["a", "b"]) == ["a", "b"]
    # drawn for another folder
    assert rs.after_table(["a"], drawn, "/other", state, ["a", "b"]) == ["a"]
    assert rs.after_table(["a"], None, "/x", state, ["a", "b"]) == ["a"]
    assert rs.table_ticks(None) is None and rs.table_ticks({"x": 1}) is None
    assert rs.table_ticks({"selection": {"rows": [2]}}) == [2]
