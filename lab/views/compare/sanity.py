"""Sanity before a verdict: what makes a comparison's answer not to be believed as it stands.

A strong-scaling efficiency above 1.1 (a speedup above the device ratio) says the runs did
different work; its group's verdict is ``verdict.SUSPECT`` and a ``superlinear`` warning names the
likely causes. A run placed as single whose process tree trained in several processes at once (a
script that starts its own DDP, as Lightning does) gets a ``multiprocess_single`` warning with the
fix. The pre-flight's expectations saved in a run folder are a card's reason when it has no profile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lab.views.compare import verdict as v
from lab.views.compare.fairness import FairnessWarning
from lab.views.compare.groups import Group, several_processes
from lab.views.compare.runs import CompareRun

MULTIPROCESS_SINGLE = "multiprocess_single"
SUPERLINEAR = "superlinear"
FIX = "launch it as ddp so the lab places the processes and their threads"


def multiprocess_note(run: CompareRun) -> str | None:
    """Why a single run's throughput is not one process's, and the fix; None for any other run."""
    if not several_processes(run):
        return None
    return (
        f"placed as single, but {run.train_processes} of its processes trained at once (a script "
        "that starts its own DDP, as Lightning does): each had the single run's threads, so its "
        f"throughput is not a single process's and it is no fair baseline; {FIX}"
    )


def warnings(
    runs: Sequence[CompareRun], names: Mapping[str, str], groups: Sequence[Group]
) -> list[FairnessWarning]:
    """One ``multiprocess_single`` warning per such run, one ``superlinear`` per suspect group."""
    out = [
        FairnessWarning(MULTIPROCESS_SINGLE, f"{names[r.key]}: {note}")
        for r in runs
        if (note := multiprocess_note(r))
    ]
    for g in groups:
        if g.verdict == v.SUSPECT and g.efficiency is not None:
            n = g.devices
            out.append(
                FairnessWarning(
                    SUPERLINEAR,
                    f"{g.mode} on {n} device{'s' * (n != 1)}: efficiency {g.efficiency:.2f}; "
                    f"{v.SUPERLINEAR_CAUSES}",
                )
            )
    return out


def expectation(runs: Sequence[CompareRun]) -> str | None:
    """The first pre-flight expectation of the given runs (a card's reason without a profile)."""
    return next((r.expectations[0] for r in runs if r.expectations), None)
