"""What the Compare page says of derived figures: the columns' help, how to read them, and the
warnings.

Owns the words around ``lab.views.compare.derived`` and ``lab.views.compare.speed``:
the help of the ``figures``, ``speedup of``, ``wall time (s)`` and peak
memory columns, ``HOW_TO_READ``, and the fairness warnings (``warnings``,
collected by ``lab.views.compare.fairness``) that say when a figure is derived and
what from (``derived``), when a speedup is of steps/s (``steps_speedup``) or
divides a picked tag by samples/s (``picked_tag``), when runs differ in what
the lab can see of them (``lab_sees``: devices, mode, model, batch) and when
a script left a GPU it was given idle (``idle_gpus``). Tested by
tests/test_derived.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lab.runfolder import SCRIPT
from lab.views.compare.derived import DERIVED, PEAKS_NVML, sees_config
from lab.views.compare.runs import CompareRun
from lab.views.compare.speed import STEPS, Speed

IDLE_PCT = 5.0  # a GPU whose mean utilisation stays under this did no work worth the name

FIGURES_HELP = (
    "measured: the trainer's own figures (summary.json). derived: the run has no summary.json (a "
    "user's "
    "script, foreign logs, a run that did not finish), so its figures come from its event files "
    "and the "
    "supervisor's records: throughput from the tag you pick, steps/s from its loss tag, wall time "
    "from "
    "the supervisor's start and end, peak memory from NVML's samples."
)
SPEEDUP_OF_HELP = (
    "What the speedup divides: samples/s where the run and the baseline both have them; else "
    "steps/s "
    "of their loss tags, which equals the samples/s speedup only if a step trains the same global "
    "batch; 'X against the baseline's samples/s' when a picked tag X is the run's throughput."
)
WALL_HELP = (
    "Seconds the run took, start-up included: the supervisor's start to end (status.json), the "
    "same for "
    "every kind of run; a trainer run by hand: its own wall_time_s; foreign logs: the span of its "
    "sys/ "
    "samples."
)
PEAK_HELP = "Peak memory the trainer's allocator held on the device (torch's max_memory_allocated)."
PEAK_NVML_HELP = (
    "Derived: the highest of NVML's used-memory samples of physical GPU <i> (sys/): everything the "
    "driver counts on it, the CUDA context included; not the allocator's peak, and not comparable "
    "with a cuda<i> column."
)

HOW_TO_READ = """\
**Derived figures.** A run without the trainer's summary.json (a user's
script, foreign logs with the supervisor's sys/ beside them, a run that did
not finish) is marked *derived*: its throughput is the tag you pick (tags
named like samples_per_sec, throughput, img/s or it/s are offered first), or
none, and then its speedup is of **steps/s**: the step rate of its loss tag
against the baseline's. A steps/s speedup is a samples/s speedup only if each
step trains the same global batch, which the lab cannot see in a script;
efficiency then assumes it does (strong scaling). Peak memory is NVML's used
memory of each GPU (columns gpu<i>, physical index), wall time the
supervisor's start to end, utilisation the sys/ samples, as for any run."""


def _listed(names: Mapping[str, str], keys: Sequence[str]) -> str:
    return ", ".join(names[k] for k in keys)


def _what(r: CompareRun) -> str:
    return "a user's script" if r.kind == SCRIPT else "foreign TensorBoard logs"


def _sources(m: Mapping[str, Any]) -> str:
    speed = (
        f"throughput from its tag {m['throughput of']}"
        if m.get("throughput of")
        else f"speed as steps/s of {m['loss tag']}"
        if m.get("steps/s")
        else "no speed figure (no loss tag)"
    )
    memory = (
        "peak memory from NVML's used memory per GPU, not the allocator's peak"
        if m.get("peaks of") == PEAKS_NVML
        else "no per-device memory (no GPU samples)"
    )
    return f"{speed}; {memory}; wall time and utilisation from the supervisor's records"


def _seen(r: CompareRun, name: str, m: Mapping[str, Any]) -> str:
    devices = ", ".join(m.get("devices") or []) or "none"
    if r.kind == SCRIPT:
        return (
            f"of {name} ({_what(r)}) it knows only the devices it gave ({devices}) and the mode "
            "it launched "
            f"({m.get('mode') or '?'}), not what the script did with them, nor its model, data or "
            "batch"
        )
    return (
        f"of {name} ({_what(r)}) only the GPUs sampled in its sys/ ({devices}), "
        "not its mode, model or batch"
    )


def warnings(
    runs: Sequence[CompareRun],
    names: Mapping[str, str],
    metrics: Mapping[str, Mapping[str, Any]],
    speeds: Mapping[str, Speed],
    baseline_key: str,
    util: Mapping[str, Mapping[str, float]],
) -> list[tuple[str, str]]:
    """``(key, message)`` for the derived figures among the chosen runs (module docstring)."""
    out: list[tuple[str, str]] = []
    blind = [r for r in runs if not sees_config(r)]
    for r in blind:
        if metrics[r.key]["figures"] == DERIVED:
            out.append(
                (
                    "derived",
                    f"{names[r.key]}'s figures are derived ({_what(r)}, no summary.json): "
                    f"{_sources(metrics[r.key])}.",
                )
            )
    by_steps = [k for k, s in speeds.items() if k != baseline_key and s.unit == STEPS]
    if by_steps:
        assumed = any(speeds[k].assumed for k in by_steps)
        out.append(
            (
                "steps_speedup",
                f"The speedup of {_listed(names, by_steps)} is of steps/s (the step rate of "
                "the loss tag), not samples/s: it equals a samples/s speedup only if each step "
                "trains the baseline's global batch"
                + (
                    ", which the lab cannot see in a script; efficiency assumes it does (strong "
                    "scaling): if the script keeps the batch per device instead, read its "
                    "speedup as its efficiency."
                    if assumed
                    else "."
                ),
            )
        )
    for k, s in speeds.items():
        if k != baseline_key and s.of and "against" in s.of and s.unit != STEPS:
            out.append(
                (
                    "picked_tag",
                    f"{names[k]}'s speedup divides {s.of}: a speedup only if that tag counts "
                    "samples per second of the same global batch.",
                )
            )
    if blind and len(blind) < len(runs):
        out.append(
            (
                "lab_sees",
                "The lab does not see as much of every run: of its trainer's runs it knows the "
                "model, data, batch and the devices and mode they really used; "
                + "; ".join(_seen(r, names[r.key], metrics[r.key]) for r in blind)
                + ". Make sure they train the same model, data and global batch.",
            )
        )
    for r in blind:
        idle = [
            g
            for g in metrics[r.key].get("devices") or []
            if util.get(r.key, {}).get(g, 100.0) < IDLE_PCT
        ]
        if idle:
            out.append(
                (
                    "idle_gpus",
                    f"{', '.join(idle)} given to {names[r.key]} stayed idle (mean utilisation "
                    "under "
                    f"{IDLE_PCT:.0f}%): the script may use fewer devices than it was given, which "
                    "lowers its efficiency per device.",
                )
            )
    return out
