"""Small shared pieces of the dashboard's text in and out: formatting numbers
for people (bytes, MiB, durations, rates, "3 min ago"), parsing what a user
types into a form (tags, ``KEY=VALUE`` lines), and ``ChartSpec``,
the plain description of one chart that ``lab.views.live.run_charts`` and
``lab.views.logs.browse`` return and the pages hand to ``lab.views.charts``. No
streamlit here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from lab.runfolder import parse_time

# The dashboard's starting point for a run (Launch form, "Compare modes"):
# tinycnn on digits for 10 epochs takes ~6 s of training on one busy CPU core
# (val acc ~0.9), so even DDP under torchrun finishes in about a minute.
QUICK_EPOCHS = 10


@dataclass(frozen=True)
class ChartSpec:
    """One chart: a title, axis titles and its traces ``(name, x, y)``."""

    title: str
    x_title: str
    y_title: str
    traces: list[tuple[str, Any, Any]] = field(default_factory=list)
    y_range: tuple[float, float] | None = None
    x_is_time: bool = False


def fmt_bytes(n: float | None) -> str:
    """``1536`` -> ``"1.5 KiB"``; None -> ``"–"``."""
    if n is None or not math.isfinite(float(n)):
        return "–"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover - loop always returns


def fmt_mib(mib: float | None) -> str:
    """A size given in MiB, as a person reads it (``3174`` -> ``"3.1 GiB"``)."""
    return "–" if mib is None else fmt_bytes(float(mib) * 1024 * 1024)


def fmt_duration(seconds: float | None) -> str:
    """``83`` -> ``"1:23"``, ``3723`` -> ``"1:02:03"``; None/negative/NaN -> ``"–"``."""
    if seconds is None:
        return "–"
    s = float(seconds)
    if not math.isfinite(s) or s < 0:
        return "–"
    s = int(round(s))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def fmt_rate(samples_per_sec: float | None) -> str:
    """Throughput in samples/s with sensible precision."""
    if samples_per_sec is None or not math.isfinite(float(samples_per_sec)):
        return "–"
    v = float(samples_per_sec)
    if v >= 100:
        return f"{v:,.0f} samples/s"
    return f"{v:.1f} samples/s"


def fmt_ago(value: Any, now: datetime | None = None) -> str:
    """``"12 s ago"``, ``"3 min ago"``, ``"2 h ago"``, ``"4 d ago"``; unknown -> ``"–"``."""
    dt = parse_time(value)
    if dt is None:
        return "–"
    now = now or datetime.now(timezone.utc)
    s = max(0.0, (now - dt).total_seconds())
    if s < 60:
        return f"{s:.0f} s ago"
    if s < 3600:
        return f"{s / 60:.0f} min ago"
    if s < 86400:
        return f"{s / 3600:.0f} h ago"
    return f"{s / 86400:.0f} d ago"


def shell_line(argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> str:
    """A copyable POSIX shell rendering of ``argv`` with ``env`` set, for people only.

    The launcher never runs this string (it runs ``argv`` without a shell); it
    is what a user pastes into a terminal to reproduce a run.
    """
    import shlex

    lines = []
    if cwd:
        lines.append(f"cd {shlex.quote(cwd)}")
    parts = [f"{k}={shlex.quote(str(v))}" for k, v in (env or {}).items()]
    # An option and its value stay on one line, so long torchrun commands read well.
    args = [shlex.quote(str(a)) for a in argv]
    i = 0
    head: list[str] = []
    while i < len(args) and not str(argv[i]).startswith("--"):
        head.append(args[i])
        i += 1
    if head:
        parts.append(" ".join(head))
    while i < len(args):
        item = args[i]
        if i + 1 < len(args) and not str(argv[i + 1]).startswith("--"):
            item += " " + args[i + 1]
            i += 1
        parts.append(item)
        i += 1
    lines.append(" \\\n  ".join(parts))
    return "\n".join(lines)


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>#|~$:])")


def md_escape(text: str) -> str:
    """``text`` shown literally inside Streamlit markdown (paths with ``*``, ``_``, ``$``...)."""
    return _MD_SPECIAL.sub(r"\\\1", str(text))
