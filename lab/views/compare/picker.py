"""The Compare page's run picker: the runs offered narrowed by a regex on their names (the Logs
page's run filter, ``lab.views.logs.run_select.match_runs``) and by sweep, the selection kept
across reruns, and the line that counts them. The default selection is
``lab.views.compare.runs.default_selection`` (the newest sweep, else the newest 10 runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from lab.views.compare.runs import CompareRun
from lab.views.logs.run_select import match_runs

ALL = ""  # the sweep filter's "any run"


def sweeps(runs: Sequence[CompareRun]) -> list[str]:
    """The sweeps among ``runs``, the newest first (by their newest run)."""
    newest: dict[str, str] = {}
    for r in runs:
        if r.sweep_id:
            newest[r.sweep_id] = max(newest.get(r.sweep_id, ""), r.created_at)
    return sorted(newest, key=lambda s: (newest[s], s), reverse=True)


def sweep_label(sweep_id: str, runs: Sequence[CompareRun]) -> str:
    """``"any sweep or none"`` for ``ALL``; else the sweep's id and how many runs it holds."""
    if sweep_id == ALL:
        return "any sweep or none"
    n = sum(r.sweep_id == sweep_id for r in runs)
    return f"{sweep_id} · {n} run{'s' * (n != 1)}"


def matching(
    runs: Sequence[CompareRun], names: Mapping[str, str], pattern: str, sweep: str = ALL
) -> tuple[list[str], str | None]:
    """The keys of the runs whose name the regex ``pattern`` matches (``re.search``; all for an
    empty one) in ``sweep`` (``ALL``: any), in run order; a bad regex is a message and no run."""
    inside = [r.key for r in runs if sweep == ALL or r.sweep_id == sweep]
    found, error = match_runs([names[k] for k in inside], pattern)
    hit = set(found)
    return [k for k in inside if names[k] in hit], error


def kept(stored: Iterable[str] | None, keys: Sequence[str]) -> list[str]:
    """The stored selection without the runs that have gone, in its own order."""
    exist = set(keys)
    return [k for k in (stored or []) if k in exist]


def offered(keys: Sequence[str], found: Iterable[str], selected: Iterable[str]) -> list[str]:
    """What the picker lists: the matching runs and the selected ones (a chosen run stays listed
    when the filter changes), in run order."""
    show = set(found) | set(selected)
    return [k for k in keys if k in show]


def count_line(found: int, total: int, selected: int) -> str:
    """``"12 of 1000 runs match · 10 chosen"``."""
    match = f"{found} of {total} runs match" if found != total else f"{total} runs"
    return f"{match} · {selected} chosen"
