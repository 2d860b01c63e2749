"""The answer first: per group (mode, knob value, device count) against the baseline group, the
speedup with its interval and that interval's real coverage, the verdict, the efficiency and one
reason (a mode not run as asked, the profiled step's wait, else the pre-flight's expectation; the
likely causes of a superlinear efficiency). A card is a ``groups.Group`` as shown: the ratio of the
groups' medians, the interval over the pairs of runs (``verdict.compare_groups``). The baseline
group, and a group that ran as another mode, make no card. Also the warnings folded into one
counting line (``warning_summary``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lab.engine.spec.modes import DDP, DP, FSDP
from lab.views.compare import anatomy, groups, sanity
from lab.views.compare.fairness import FairnessWarning
from lab.views.compare.groups import Group
from lab.views.compare.verdict import (
    DEFAULT_MARGIN_PCT,
    DEFAULT_SOURCE,
    SUPERLINEAR_CAUSES,
    SUSPECT,
)

WHAT = {  # a warning key's words in the counting line (a knob's: its ``cause``); others: the key
    "effective_mode": "not run as asked",
    "busy_machine": "busy machine",
    "global_batch": "global batch differs",
    "device_count": "device count differs",
    "host": "hosts differ",
    "model": "models differ",
    "dataset": "datasets differ",
    "seed": "seeds differ",
    "amp": "precision differs",
    "no_summary": "no summary.json",
    "only_gpu0": "only GPU 0 worked",
    "multiprocess_single": "single run in several processes",
    "superlinear": "efficiency above 1.1",
    "batchnorm": "BatchNorm batches differ",
    "nccl_preset": "NCCL preset differs",
}


@dataclass(frozen=True)
class Card:
    """One group against the baseline group; ``runs`` repeats folded into it."""

    mode: str
    devices: int
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    efficiency: float | None
    verdict: str
    reason: str | None
    runs: int
    coverage: float | None = None  # the interval's real coverage (verdict.compare_groups)
    coverage_text: str | None = None  # its name: "range of 3×3 pairs, 90%"
    margin_pct: float = DEFAULT_MARGIN_PCT
    margin_source: str = DEFAULT_SOURCE
    baseline: str = ""  # the baseline group, "single on 1 device"

    def value_text(self) -> str:
        """The speedup alone, ``"1.29×"`` (a card's big number, short enough to show whole)."""
        return "–" if self.speedup is None else f"{self.speedup:.2f}×"

    def interval_text(self) -> str | None:
        """The speedup's interval and its coverage, ``"1.22–1.36, range of 3×3 pairs, 90%"``;
        None without one."""
        if self.speedup is None or self.ci_low is None or self.ci_high is None:
            return None
        cov = f", {self.coverage_text}" if self.coverage_text else ""
        return f"{self.ci_low:.2f}–{self.ci_high:.2f}{cov}"

    def delta_text(self) -> str | None:
        """The interval short enough for a card's delta, its coverage beside it:
        ``"0.85–1.30, 90%"``, ``"1.62–2.00, windows only"``; None without one."""
        if self.speedup is None or self.ci_low is None or self.ci_high is None:
            return None
        short = (
            f"{100 * self.coverage:.0f}%"
            if self.coverage is not None and "pairs" in (self.coverage_text or "")
            else "windows only"
        )
        return f"{self.ci_low:.2f}–{self.ci_high:.2f}, {short}"

    def caption(self, marker: str = "") -> str:
        """The line under a card: the mode's marker, the interval's full name, the reason, the
        efficiency and the repeats."""
        eff = None if self.efficiency is None else f"efficiency {self.efficiency:.2f}"
        repeats = f"{self.runs} repeats" if self.runs > 1 else None
        parts = (marker, self.coverage_text, self.reason, eff, repeats)
        return " · ".join(x for x in parts if x)

    def speedup_text(self) -> str:
        """``"1.29× (1.22–1.36, range of 3×3 pairs, 90%)"``: as the text and HTML say it."""
        interval = self.interval_text()
        return self.value_text() + (f" ({interval})" if interval else "")

    def to_json(self) -> dict[str, Any]:
        """The ``headline`` item of ``lab compare --json``: the six keys ``mode``, ``devices``,
        ``speedup`` (``{"value", "ci_low", "ci_high", "coverage", "coverage_text"}``),
        ``efficiency``, ``verdict``, ``reason``, then ``runs``, ``margin_pct``,
        ``margin_source`` and ``baseline``."""
        return {
            "mode": self.mode,
            "devices": self.devices,
            "speedup": None
            if self.speedup is None
            else {
                "value": self.speedup,
                "ci_low": self.ci_low,
                "ci_high": self.ci_high,
                "coverage": self.coverage,
                "coverage_text": self.coverage_text,
            },
            "efficiency": self.efficiency,
            "verdict": self.verdict,
            "reason": self.reason,
            "runs": self.runs,
            "margin_pct": self.margin_pct,
            "margin_source": self.margin_source,
            "baseline": self.baseline,
        }


def mode_of(row: Any) -> str:
    """The asked mode; a weak-scaling run is a mode of its own (it trains a larger global batch),
    and so is each value of a knob sweep (``ddp bucket-cap-mb=25``)."""
    return groups.mode_label(row.run, row.figures)


def reason(row: Any) -> str | None:
    """The one reason a run gives: a mode not run as asked, else its profiled step's wait."""
    m = row.figures
    if m.mode and m.effective_mode and m.effective_mode != m.mode:
        n = m.device_count
        return f"{m.mode.upper()} ran as {m.effective_mode} on {n} device{'s' * (n != 1)}"
    data = m.profile
    if not data or not data.get("step_ms"):
        return None
    step = float(data["step_ms"])
    phases = data.get("phases_ms") or {}
    exposed = anatomy.comm_segments(phases)["comm_exposed"]
    if data.get("effective_mode") == DDP:
        return f"DDP waits {exposed:.1f} ms of its {step:.1f} ms step on all-reduce"
    if data.get("effective_mode") == FSDP:
        gather = sum(phases.get(f"comm_all_gather_{w}_exposed", 0.0) for w in ("fwd", "bwd"))
        scatter = phases.get("comm_reduce_scatter_exposed", 0.0)
        return (
            f"FSDP waits {gather:.1f} ms on all-gather and {scatter:.1f} ms on reduce-scatter of "
            f"its {step:.1f} ms step"
        )
    if data.get("effective_mode") == DP:
        seg = anatomy.step_segments(phases)
        dp = sum(seg[k] for k in anatomy.DP_PHASES)
        return f"DP spends {dp:.1f} ms of its {step:.1f} ms step scattering and gathering"
    return None


def group_name(mode: str, devices: int) -> str:
    return f"{mode} on {devices} device{'s' * (devices != 1)}"


def _card(g: Group, rows: list[Any], baseline: str) -> Card:
    reasons = [x for x in (reason(r) for r in rows) if x]
    why = reasons[0] if reasons else sanity.expectation([r.run for r in rows])
    if g.verdict == SUSPECT:
        why = SUPERLINEAR_CAUSES[:1].upper() + SUPERLINEAR_CAUSES[1:]
    return Card(
        mode=g.mode,
        devices=g.devices,
        speedup=g.speedup,
        ci_low=g.low,
        ci_high=g.high,
        efficiency=g.efficiency,
        verdict=g.verdict,
        reason=why,
        runs=g.runs,
        coverage=g.coverage,
        coverage_text=g.coverage_text,
        margin_pct=g.margin_pct,
        margin_source=g.margin_source,
        baseline=baseline,
    )


def headline(rows: Sequence[Any], found: Sequence[Group]) -> tuple[Card, ...]:
    """One card per group against the baseline group, in the rows' order; the baseline group and
    a group that ran as another mode (DP on one device: single) make none."""
    by_key = {r.key: r for r in rows}
    base = next((g for g in found if g.is_baseline), None)
    baseline = "" if base is None else group_name(base.mode, base.devices)
    return tuple(
        _card(g, [by_key[k] for k in g.keys], baseline)
        for g in found
        if not g.is_baseline and g.ran_as is None
    )


def warning_summary(warnings: Sequence[FairnessWarning]) -> str:
    """One line counting the warnings by cause: "5 notes: 3 not run as asked, 1 busy machine"."""
    if not warnings:
        return ""
    # counted by their words: several keys (the DDP options) share one cause
    counts = Counter(w.cause or WHAT.get(w.key, w.key.replace("_", " ")) for w in warnings)
    parts = ", ".join(f"{n} {what}" for what, n in counts.items())
    return f"{len(warnings)} note{'s' * (len(warnings) != 1)}: {parts}"
