"""The answer first: per mode against the baseline, the speedup with its interval, the verdict, the
efficiency and the one reason the anatomy gives. Repeats of a mode fold into one card: the median
over the repeats, their speedups' range as the interval. Also the warnings folded into one counting
line (``warning_summary``).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lab.engine.launch.config import DDP, DP
from lab.engine.sweep.plan import WEAK
from lab.views.compare import anatomy
from lab.views.compare.fairness import FairnessWarning
from lab.views.compare.noise import FASTER, SLOWER, WITHIN

WHAT = {  # a warning key's words in the counting line; other keys read as their key
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
}


@dataclass(frozen=True)
class Card:
    """One mode against the baseline; ``runs`` repeats folded into it."""

    mode: str
    devices: int
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    efficiency: float | None
    verdict: str
    reason: str | None
    runs: int

    def value_text(self) -> str:
        """The speedup alone, ``"1.29×"`` (a card's big number, short enough to show whole)."""
        return "–" if self.speedup is None else f"{self.speedup:.2f}×"

    def interval_text(self) -> str | None:
        """The speedup's interval, ``"1.22–1.36"``; None without one."""
        if self.speedup is None or self.ci_low is None or self.ci_high is None:
            return None
        return f"{self.ci_low:.2f}–{self.ci_high:.2f}"

    def speedup_text(self) -> str:
        """``"1.29× (1.22–1.36)"``: the speedup with its interval, as the text and HTML say it."""
        interval = self.interval_text()
        return self.value_text() + (f" ({interval})" if interval else "")

    def to_json(self) -> dict[str, Any]:
        """The ``headline`` item of ``lab compare --json``: exactly these six keys."""
        return {
            "mode": self.mode,
            "devices": self.devices,
            "speedup": None
            if self.speedup is None
            else {"value": self.speedup, "ci_low": self.ci_low, "ci_high": self.ci_high},
            "efficiency": self.efficiency,
            "verdict": self.verdict,
            "reason": self.reason,
        }


def mode_of(row: Any) -> str:
    """The asked mode; a weak-scaling run is a mode of its own (it trains a larger global batch),
    and so is each value of a knob sweep (``ddp bucket-cap-mb=25``)."""
    m = row.figures
    mode = str(m.mode or m.effective_mode or "?")
    mode = f"{mode} (weak)" if row.run.scaling == WEAK else mode
    return f"{mode} {row.run.varied_text}".strip()


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
    if data.get("effective_mode") == DP:
        seg = anatomy.step_segments(phases)
        dp = sum(seg[k] for k in anatomy.DP_PHASES)
        return f"DP spends {dp:.1f} ms of its {step:.1f} ms step scattering and gathering"
    return None


def _verdict(low: float | None, high: float | None, verdicts: list[str]) -> str:
    if len(verdicts) == 1 or low is None or high is None:
        return verdicts[0]
    return FASTER if low > 1 else SLOWER if high < 1 else WITHIN


def _card(mode: str, devices: int, rows: list[Any]) -> Card:
    speeds = [r.speed.speedup for r in rows if r.speed.speedup is not None]
    effs = [r.speed.efficiency for r in rows if r.speed.efficiency is not None]
    sp = statistics.median(speeds) if speeds else None
    if len(rows) == 1 and rows[0].speed.ratio is not None:
        low, high = rows[0].speed.ratio.ci_low, rows[0].speed.ratio.ci_high
    elif len(speeds) > 1:
        low, high = min(speeds), max(speeds)
    else:
        low = high = None
    reasons = [x for x in (reason(r) for r in rows) if x]
    return Card(
        mode=mode,
        devices=devices,
        speedup=sp,
        ci_low=low,
        ci_high=high,
        efficiency=statistics.median(effs) if effs else None,
        verdict=_verdict(low, high, [r.verdict for r in rows]),
        reason=reasons[0] if reasons else None,
        runs=len(rows),
    )


def headline(rows: Sequence[Any]) -> tuple[Card, ...]:
    """One card per (asked mode, device count) against the baseline, in the rows' order; the
    baseline itself makes no card."""
    groups: dict[tuple[str, int], list[Any]] = {}
    for r in rows:
        if not r.is_baseline:
            groups.setdefault((mode_of(r), r.figures.device_count), []).append(r)
    return tuple(_card(mode, devices, g) for (mode, devices), g in groups.items())


def warning_summary(warnings: Sequence[FairnessWarning]) -> str:
    """One line counting the warnings by cause: "5 notes: 3 not run as asked, 1 busy machine"."""
    if not warnings:
        return ""
    counts = Counter(w.key for w in warnings)
    parts = ", ".join(f"{n} {WHAT.get(k, k.replace('_', ' '))}" for k, n in counts.items())
    return f"{len(warnings)} note{'s' * (len(warnings) != 1)}: {parts}"
