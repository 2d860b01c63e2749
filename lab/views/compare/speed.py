"""What a row's speedup divides, and the speedup and efficiency on that figure.

Samples/s when the run and the baseline both have them; else steps/s of each run's loss tag; else
none. ``of`` says which, in the table's words ("samples/s", "steps/s of train/loss", "<tag> against
the baseline's samples/s"). Efficiency on samples/s is ``lab.views.compare.scaling``'s; on steps/s,
strong scaling (a step is the same work) gives speedup x baseline devices / devices, weak scaling
the steps/s ratio itself. A run whose batches the lab cannot see is taken as strong (``assumed``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.engine.spec.sweep import STRONG, WEAK
from lab.views.compare import scaling
from lab.views.compare.derived import SAMPLES
from lab.views.compare.figures import RunFigures
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

    @property
    def scaled(self) -> Ratio | None:
        """The speedup's interval times ``factor`` (efficiency's, on the speedup's verdict)."""
        return self.ratio.scaled(self.factor) if self.ratio else None


def speedup(throughput: float | None, baseline_throughput: float | None) -> float | None:
    """Throughput relative to the baseline's; None when either is unknown or zero."""
    if not throughput or not baseline_throughput:
        return None
    return float(throughput) / float(baseline_throughput)


def _of(run_of: str | None, base_of: str | None) -> str:
    return run_of if run_of == base_of else f"{run_of} against the baseline's {base_of}"


def _pick(m: RunFigures, base: RunFigures) -> tuple[str, str, float, float, Any, Any] | None:
    """``(unit, of, value, base value, spread, base spread)`` of the first figure both runs have."""
    if m.throughput and base.throughput:
        return (
            SAMPLES,
            _of(m.throughput_of or SAMPLES, base.throughput_of or SAMPLES),
            m.throughput,
            base.throughput,
            m.spread,
            base.spread,
        )
    if m.steps_per_sec and base.steps_per_sec:
        return (
            STEPS,
            f"{STEPS} of " + _of(m.loss_tag, base.loss_tag),
            m.steps_per_sec,
            base.steps_per_sec,
            m.steps_spread,
            base.steps_spread,
        )
    return None


def speed(m: RunFigures, base: RunFigures) -> Speed:
    """The speedup of a run (figures ``m``) against the baseline's on their common figure."""
    devices, base_devices = m.device_count, base.device_count
    related = scaling.relation(m, base)
    assumed = related is None and not (m.batches_seen and base.batches_seen)
    related = STRONG if assumed else related
    picked = _pick(m, base)
    if picked is None:
        return Speed(None, None, None, None, None, base_devices / devices, related, assumed)
    unit, of, value, base_value, spread, base_spread = picked
    rat = ratio(spread, base_spread)
    sp = rat.value if rat else speedup(value, base_value)
    factor = base_devices / devices
    if unit == SAMPLES:
        eff = scaling.efficiency(related, value, devices, base_value, base_devices)
    else:  # one step is the same work under strong scaling, a device's same batch under weak
        factor = 1.0 if related == WEAK else factor
        eff = None if related is None else sp * factor
    return Speed(of, unit, rat, sp, eff, factor, related, assumed)
