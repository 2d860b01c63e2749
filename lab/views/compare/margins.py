"""Where Compare's noise margin comes from: the engine's latest measured run-to-run noise for a host
and device count (``lab noise``'s records, ``lab.engine.noise.record.latest_margin``), looked up per
group by ``verdict.Margins``; without a record (or an engine without noise records) the documented
10%.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
_RECORDS = "lab.engine.noise.record"


def measured(runs_root: Path) -> Callable[[str | None, int], Any] | None:
    """``(host, devices) -> Margin | None``: the newest noise record's margin for that host and
    device count under ``runs_root``; None when the engine keeps no noise records."""
    try:
        records = importlib.import_module(_RECORDS)
    except ImportError:
        log.debug("no %s: the documented margin", _RECORDS)
        return None
    latest = records.latest_margin

    def lookup(host: str | None, devices: int) -> Any:
        return latest(Path(runs_root), host, devices) if host else None

    return lookup
