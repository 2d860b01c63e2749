"""Choosing runs in a folder of hundreds: the Logs page's run filter, experiments and selection.

Owns what TensorBoard's runs selector does, as plain functions of run names:
the run filter (a regular expression, ``re.search``, as TensorBoard's
"Filter runs (regex)"), the line counting what it matches, the runs drawn
(those selected that the filter matches), runs grouped by their parent
folder (an experiment) with a per-group toggle, and the selection itself:
what is kept across reruns (names; a run that vanished is skipped, new runs
are not added), the default when a folder opens, and how rows chosen in the
hyperparameters table change it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

DEFAULT_LIMIT = 6
TOP_LEVEL = "."


def match_runs(run_names: Sequence[str], pattern: str) -> tuple[list[str], str | None]:
    """Runs whose name the regex ``pattern`` matches anywhere; all for an empty pattern; a bad regex
    is a message."""
    pat = (pattern or "").strip()
    if not pat:
        return list(run_names), None
    try:
        rx = re.compile(pat)
    except re.error as e:
        where = f" at position {e.pos}" if e.pos is not None else ""
        return (
            [],
            f"The run filter {pat!r} is not a valid regular expression ({e.msg}{where}): fix it "
            "or clear it.",
        )
    return [r for r in run_names if rx.search(r)], None


def default_selection(run_names: Sequence[str], limit: int = DEFAULT_LIMIT) -> list[str]:
    """Runs selected when a folder opens: the first ``limit`` by name."""
    return sorted(run_names)[:limit]


def current(stored: Iterable[str] | None, run_names: Sequence[str]) -> list[str]:
    """The selection to show: the stored names that still exist, in run order; the default when
    nothing is stored."""
    if stored is None:
        return default_selection(run_names)
    keep = set(stored)
    return [r for r in run_names if r in keep]


def shown(selected: Iterable[str], matching: Iterable[str]) -> list[str]:
    """The runs drawn: selected and matched by the filter, in the filter's order."""
    sel = set(selected)
    return [r for r in matching if r in sel]


def count_line(matching: int, total: int, selected: int, drawn: int) -> str:
    """``"30 of 300 runs match the filter · 30 selected, drawn 30"``."""
    match = f"{matching} of {total} runs match the filter" if matching != total else f"{total} runs"
    return f"{match} · {selected} selected, {drawn} drawn"


def nothing_drawn_hint(matching: int, selected: int) -> str:
    """Why no chart is drawn, and the click that fixes it."""
    if not matching:
        return "No run matches the run filter: change it or clear it."
    if not selected:
        return (
            "No run is selected: pick runs, switch an experiment on, "
            'or press "Select all matching".'
        )
    return (
        f'None of the {matching} runs the filter matches is selected: press "Select all matching".'
    )


def experiment_of(run: str) -> str:
    """A run's experiment: its parent folder (``exp3`` for ``exp3/lr0.1``), ``"."`` at the top
    level."""
    head, _, _ = run.rpartition("/")
    return head or TOP_LEVEL


def experiments(run_names: Sequence[str]) -> dict[str, list[str]]:
    """Experiment -> its runs, both sorted."""
    out: dict[str, list[str]] = {}
    for r in sorted(run_names):
        out.setdefault(experiment_of(r), []).append(r)
    return dict(sorted(out.items()))


def group_on(selected: Iterable[str], runs: Sequence[str]) -> bool:
    """An experiment's toggle is on when every one of its runs is selected."""
    sel = set(selected)
    return bool(runs) and all(r in sel for r in runs)


def group_label(group: str, runs: Sequence[str], selected: Iterable[str]) -> str:
    """``"exp3 · 6/30"``: the experiment, how many of its runs are selected, of how many."""
    sel = set(selected)
    name = "(top level)" if group == TOP_LEVEL else group
    return f"{name} · {sum(r in sel for r in runs)}/{len(runs)}"


def toggle(
    selected: Iterable[str], runs: Iterable[str], on: bool, run_names: Sequence[str]
) -> list[str]:
    """The selection with ``runs`` added (``on``) or removed, in run order."""
    sel = set(selected)
    sel = sel | set(runs) if on else sel - set(runs)
    return [r for r in run_names if r in sel]


def rows_on(selected: Iterable[str], row_runs: Sequence[Sequence[str]]) -> list[int]:
    """Rows of the hyperparameters table to show ticked: those whose runs are all selected."""
    sel = set(selected)
    return [i for i, runs in enumerate(row_runs) if runs and all(r in sel for r in runs)]


def apply_table_choice(
    selected: Sequence[str],
    row_runs: Sequence[Sequence[str]],
    ticked_before: Sequence[int],
    ticked_now: Sequence[int] | None,
    run_names: Sequence[str],
) -> list[str]:
    """The selection after the user ticked or unticked rows of the table the page drew last.

    ``row_runs``: that table's rows (the runs each row stands for); ``ticked_before``:
    the rows the page drew ticked; ``ticked_now``: what the table reports now (None:
    the table was not drawn). A newly ticked row adds its runs, an unticked one removes
    them; selected runs without a row in that table stay as they are.
    """
    if ticked_now is None:
        return list(selected)
    before, now = set(ticked_before), {i for i in ticked_now if 0 <= i < len(row_runs)}
    out = list(selected)
    for i in sorted(before - now):
        out = toggle(out, row_runs[i], False, run_names)
    for i in sorted(now - before):
        out = toggle(out, row_runs[i], True, run_names)
    return out


def after_table(
    selected: Sequence[str],
    drawn: Mapping | None,
    folder: str,
    state: Mapping | None,
    run_names: Sequence[str],
) -> list[str]:
    """``apply_table_choice`` against the table the page drew last (``drawn``: ``folder``, ``rows``,
    ``ticked``).

    A table drawn for another folder, or none, changes nothing.
    """
    if not isinstance(drawn, Mapping) or drawn.get("folder") != folder:
        return list(selected)
    return apply_table_choice(
        selected, drawn["rows"], drawn["ticked"], table_ticks(state), run_names
    )


def table_ticks(state: Mapping | None) -> list[int] | None:
    """The rows a table's selection state (``{"selection": {"rows": [...]}}``) reports; None without
    one."""
    if not isinstance(state, Mapping):
        return None
    sel = state.get("selection")
    if not isinstance(sel, Mapping):
        return None
    return [int(i) for i in sel.get("rows", [])]
