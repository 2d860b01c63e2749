"""What a row's speedup divides, and the speedup and efficiency on that figure.

A speedup divides a run's figure by the baseline's figure of the same kind.
Samples/s when both runs have one (summary.json's, the trainer's
``perf/samples_per_sec`` events, or the tag the user picked as a script's
throughput); else steps/s, the step rate of each run's loss tag
(``lab.views.compare.derived``), when both have that; else none. ``of`` says which,
in words the table shows ("samples/s", "steps/s of train/loss", or "<tag>
against samples/s" when a picked tag is divided by the baseline's
samples/s). Efficiency: as ``lab.views.compare.scaling`` defines it on samples/s;
on steps/s, strong scaling (the same global batch, so a step is the same
work) gives speedup x baseline devices / devices and weak scaling (the same
batch per device) gives the steps/s ratio itself. A run whose batches the
lab cannot see (a user's script, foreign logs) is taken as strong scaling,
``assumed`` says so, and the fairness warnings repeat it. Works on the
metrics dicts of ``lab.views.compare.table.run_metrics``. Tested by
tests/test_derived.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lab.engine.sweep.plan import STRONG, WEAK
from lab.views.compare import scaling
from lab.views.compare.derived import SAMPLES
from lab.views.compare.spread import Ratio, ratio

STEPS = "steps/s"


@dataclass(frozen=True)
class Speed:
    """One row's speedup against the baseline, on the figure ``unit`` (``SAMPLES`` or ``STEPS``)."""

    of: str | None  # what the table says the speedup divides; None: no common figure
    unit: str | None
    ratio: Ratio | None  # with its interval where both figures have one
    speedup: float | None
    efficiency: float | None
    factor: float  # efficiency = speedup x factor
    related: str | None  # strong, weak, or None (neither)
    assumed: bool = False  # the relation is taken as strong: the lab cannot see the batches


def batches_seen(m: Mapping[str, Any]) -> bool:
    """Whether a run's global or per-device batch is known."""
    return m.get("global batch") is not None or m.get("per-device batch") is not None


def _of(run_of: str | None, base_of: str | None) -> str:
    return run_of if run_of == base_of else f"{run_of} against the baseline's {base_of}"


def _pick(
    m: Mapping[str, Any], base: Mapping[str, Any]
) -> tuple[str, str, float, float, Any, Any] | None:
    """``(unit, of, value, base value, spread, base spread)`` of the first figure both runs have."""
    if m.get("throughput") and base.get("throughput"):
        return (
            SAMPLES,
            _of(m.get("throughput of") or SAMPLES, base.get("throughput of") or SAMPLES),
            m["throughput"],
            base["throughput"],
            m.get("spread"),
            base.get("spread"),
        )
    if m.get("steps/s") and base.get("steps/s"):
        return (
            STEPS,
            f"{STEPS} of " + _of(m.get("loss tag"), base.get("loss tag")),
            m["steps/s"],
            base["steps/s"],
            m.get("steps spread"),
            base.get("steps spread"),
        )
    return None


def speed(m: Mapping[str, Any], base: Mapping[str, Any], devices: int, base_devices: int) -> Speed:
    """The speedup of a run (metrics ``m``, on ``devices``) against the baseline's on their common
    figure."""
    related = scaling.relation(m, base)
    assumed = related is None and not (batches_seen(m) and batches_seen(base))
    related = STRONG if assumed else related
    picked = _pick(m, base)
    if picked is None:
        return Speed(None, None, None, None, None, base_devices / devices, related, assumed)
    unit, of, value, base_value, spread, base_spread = picked
    rat = ratio(spread, base_spread)
    sp = rat.value if rat else float(value) / float(base_value)
    factor = base_devices / devices
    if unit == SAMPLES:
        eff = scaling.efficiency(related, value, devices, base_value, base_devices)
    else:  # one step is the same work under strong scaling, a device's same batch under weak
        factor = 1.0 if related == WEAK else factor
        eff = None if related is None else sp * factor
    return Speed(of, unit, rat, sp, eff, factor, related, assumed)
