"""A ``Comparison`` as one standalone HTML file a user can attach to a report: the runs with when
and where each was recorded, the warnings, the table (speedups outside the noise green or red, as
on the page), how to read it, and the charts with their notes (plotly.js inline, once, so the file
opens with no server and no internet).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import datetime, timezone

import plotly.graph_objects as go

from lab.views.compare.comparison import Comparison
from lab.views.compare.curves import STEP_NOTE
from lab.views.compare.scaling import HOW_TO_READ as SCALING_NOTE
from lab.views.compare.table import HOW_TO_READ, TEXT_COLUMNS, frame, styled

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;
max-width:1200px;color:#222}
table{border-collapse:collapse;font-size:.85rem;margin:1rem 0}
th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
.warn{background:#fff4e5;border-left:4px solid #f0a020;padding:.5rem 1rem;margin:.5rem 0}
.meta{color:#555;font-size:.85rem}
.headline{display:flex;gap:1rem;flex-wrap:wrap}
.card{border:1px solid #ccc;border-radius:6px;padding:.5rem 1rem}
"""


def _md(text: str) -> str:
    """The two bits of markdown our texts use (**bold**, *italic*), as escaped HTML."""
    out = html.escape(text)
    parts = out.split("**")
    out = "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))
    parts = out.split("*")
    return "".join(f"<i>{p}</i>" if i % 2 else p for i, p in enumerate(parts))


def _headline(c: Comparison) -> list[str]:
    """The answer first: one card per mode against the baseline."""
    if not c.headline:
        return []
    out = [
        "<h2>Headline</h2>",
        f'<p class="meta">Against the baseline group, {html.escape(c.baseline_text)}</p>',
        '<div class="headline">',
    ]
    for card in c.headline:
        eff = "–" if card.efficiency is None else f"{card.efficiency:.2f}"
        out.append(
            f'<div class="card"><b>{html.escape(card.mode)} · {card.devices} devices</b><br>'
            f"speedup {html.escape(card.speedup_text())} {html.escape(card.verdict)}<br>"
            f"efficiency {eff}"
            + (f"<br>{html.escape(card.reason)}" if card.reason else "")
            + "</div>"
        )
    return [*out, "</div>"]


def build_html(
    c: Comparison,
    figures: Sequence[tuple[str, go.Figure, str | None]] = (),
    *,
    title: str = "Parallel Training Lab — run comparison",
    generated_at: datetime | None = None,
) -> str:
    """A complete HTML document with everything inline (plotly.js included once); ``figures`` are
    the page's charts as ``(caption, figure, note or None)``."""
    generated_at = generated_at or datetime.now(timezone.utc)
    names = c.names
    baseline_label = names[c.baseline_key] if c.rows else None
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="meta">Generated {html.escape(generated_at.isoformat(timespec="seconds"))}'
        + (f" · baseline: {html.escape(baseline_label)}" if baseline_label else "")
        + "</p>",
        *_headline(c),
        "<h2>Runs</h2><ul>",
    ]
    for r in c.runs:
        where = r.recorded_on or r.host or "unknown machine"
        parts.append(
            f"<li><b>{html.escape(names[r.key])}</b> ({html.escape(r.run_id)}): recorded "
            f"{html.escape(r.created_at or 'at an unknown time')} on {html.escape(str(where))}"
            + (f", state {html.escape(r.state)}" if r.state else "")
            + "</li>"
        )
    parts.append("</ul>")
    if c.warnings:
        parts.append(f"<h2>Warnings</h2><p>{html.escape(c.warning_summary)}</p>")
        parts += [f'<div class="warn">{html.escape(w.message)}</div>' for w in c.warnings]
    parts.append("<h2>Table</h2>")
    table = frame(c)
    formats = {col: "%.4g" for col in table.columns if col not in TEXT_COLUMNS}
    parts.append(styled(table, formats, escape=True).hide(axis="index").to_html())
    parts.append("<h2>How to read this</h2>")
    parts += [f"<p>{_md(p)}</p>" for p in (HOW_TO_READ, SCALING_NOTE, *c.notes, STEP_NOTE)]
    first = True
    for caption, fig, note in figures:
        parts.append(f"<h2>{html.escape(caption)}</h2>")
        if note:
            parts.append(f'<p class="meta">{_md(note)}</p>')
        # plotly.js (about 4 MB) goes in once, with the first figure; the others use it.
        parts.append(fig.to_html(full_html=False, include_plotlyjs=True if first else False))
        first = False
    parts.append("</body></html>")
    return "\n".join(parts)
