"""The Compare table's columns: their names, order, printf formats and help, and which are text.

One place for what the page, the CSV and the HTML export show of each
column (``column_formats``), so a renamed column cannot silently lose its
format. The figures themselves are computed in ``lab.views.compare``.
Tested by tests/test_compare.py.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lab.views import noise


@dataclass(frozen=True)
class Column:
    """A column of the table and how the page shows it (printf ``format``; None: as is)."""

    name: str
    format: str | None = None
    help: str | None = None


# Fixed columns of the table, in order; one "peak MiB <device>" column per
# device seen in any chosen run goes between the two groups.
BEFORE_DEVICES = (
    Column("run"), Column("mode"), Column("effective mode"), Column("devices"), Column("world size"),
    Column("global batch"), Column("per-device batch"), Column("throughput (samples/s)", "%.1f"),
    Column("speedup", "%.2f"), Column("efficiency", "%.2f"),
    Column("scaling", None, "strong: the baseline's global batch (the same training); weak: its batch per device "
                            "(efficiency = throughput per device against the baseline's). Recorded by the sweep, "
                            "else read from the batches."),
    *(Column(name, None, noise.HELP[name]) for name in noise.NOISE_COLUMNS),
    Column("epoch time (s)", "%.2f"),
)
AFTER_DEVICES = (
    Column("memory imbalance", "%.3f"),
    Column("loss matches baseline to step", "%d",
           "Last step up to which train/loss stays within 0.1% of the baseline's."),
    Column("final train loss", "%.4f"), Column("final val loss", "%.4f"), Column("final val acc", "%.4f"),
)
# Why one mode is faster, last: mean utilisation of each GPU ("util % gpu<i>", physical index), then these.
WHY = (
    Column("mean util %", "%.0f", "Mean utilisation of the run's GPUs while it trained (NVML samples); "
                                  "on a CPU run its CPU share: its processes' CPU time over the cores it was given."),
    Column("comm exposed % of step", "%.0f", "Communication the step waited for, as a share of the step "
                                             "(profiled runs only: Profile steps on the Launch page)."),
)
PEAK_PREFIX = "peak MiB "
PEAK_FORMAT = "%.0f"
UTIL_PREFIX = "util % "
COLUMNS_BEFORE_DEVICES = [c.name for c in BEFORE_DEVICES]
COLUMNS_AFTER_DEVICES = [c.name for c in AFTER_DEVICES]
COLUMNS_WHY = [c.name for c in WHY]
TEXT_COLUMNS = ("run", "mode", "effective mode", "devices", "scaling", *noise.NOISE_COLUMNS)  # all others are numbers (NaN = unknown)
_BY_NAME = {c.name: c for c in BEFORE_DEVICES + AFTER_DEVICES + WHY}


def column_formats(columns: Iterable[str]) -> dict[str, Column]:
    """The formatted columns among ``columns`` (a table's), peak memory columns included."""
    out = {}
    for name in columns:
        col = Column(name, PEAK_FORMAT) if name.startswith((PEAK_PREFIX, UTIL_PREFIX)) else _BY_NAME.get(name)
        if col is not None and col.format:
            out[name] = col
    return out
