"""How a warning names runs: at most a few, then "and N more", so a warning about 1,000 runs stays
one line."""

from __future__ import annotations

from collections.abc import Sequence

NAMED = 4  # a warning names at most this many runs


def few(items: Sequence[str], named: int = NAMED) -> str:
    """``items`` joined by commas, the first ``named`` of them and "and N more" for the rest."""
    shown = ", ".join(items[:named])
    return shown + (f" and {len(items) - named} more" if len(items) > named else "")
