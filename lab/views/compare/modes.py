"""One colour per mode on the Compare page: the cards' markers, the throughput and speedup bars.

A mode is what ``headline.mode_of`` names: the asked mode, or ``"<mode> (weak)"`` for a
weak-scaling run (a lighter shade of its mode's colour), followed by a knob sweep's values
(``ddp bucket-cap-mb=25``, its mode's colour). A mode the lab does not know (a script's,
foreign logs') is grey. Written once here; the charts and the cards read it.
"""

from __future__ import annotations

import html

from lab.engine.spec.modes import DDP, DP, FSDP, SINGLE

WEAK_SUFFIX = " (weak)"
OTHER = "#7f7f7f"  # a mode the lab does not know
MODE_COLOURS = {
    SINGLE: "#1f77b4",  # blue
    DP: "#ff7f0e",  # orange
    DDP: "#2ca02c",  # green
    FSDP: "#9467bd",  # purple
}
WEAK_COLOURS = {
    SINGLE: "#9ecae1",
    DP: "#fdbe85",
    DDP: "#98df8a",
    FSDP: "#c5b0d5",
}


def colour(mode: str | None) -> str:
    """The mode's colour (hex), the same on every chart and card of the page."""
    m = str(mode or "")
    base = m.split(" ")[0]  # a knob sweep's values follow the mode: its colour still
    if WEAK_SUFFIX in m:
        return WEAK_COLOURS.get(base, OTHER)
    return MODE_COLOURS.get(base, OTHER)


def marker(mode: str | None) -> str:
    """A square in the mode's colour and the mode's name, as HTML (for a card's caption)."""
    return f'<span style="color:{colour(mode)}">&#9632;</span> {html.escape(str(mode or "?"))}'
