"""The Compare table's columns: their names, order, printf formats and help, and which are text.

One place for what the page, the CSV and the HTML export show of each
column (``column_formats``), so a renamed column cannot silently lose its
format. The figures themselves are computed in ``lab.views.compare.table``.
Tested by tests/test_compare.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lab.views.compare import derived_text, noise


@dataclass(frozen=True)
class Column:
    """A column of the table and how the page shows it (printf ``format``; None: as is)."""

    name: str
    format: str | None = None
    help: str | None = None


# Fixed columns of the table, in order; one "peak MiB <device>" column per
# device seen in any chosen run goes between the two groups.
BEFORE_DEVICES = (
    Column("run"),
    Column("figures", None, derived_text.FIGURES_HELP),
    Column("mode"),
    Column("effective mode"),
    Column("devices"),
    Column("world size"),
    Column("global batch"),
    Column("per-device batch"),
    Column("throughput (samples/s)", "%.1f"),
    Column(
        "steps/s",
        "%.3g",
        "Optimizer steps per second: the median rate between the loss tag's logged steps "
        "(the first pair left out as warm-up), or over its whole span with few points.",
    ),
    Column("speedup of", None, derived_text.SPEEDUP_OF_HELP),
    Column("speedup", "%.2f"),
    Column("efficiency", "%.2f"),
    Column(
        "scaling",
        None,
        "strong: the baseline's global batch (the same training); weak: its batch per device "
        "(efficiency = throughput per device against the baseline's). Recorded by the sweep, "
        "else read from the batches.",
    ),
    *(Column(name, None, noise.HELP[name]) for name in noise.NOISE_COLUMNS),
    Column("wall time (s)", "%.1f", derived_text.WALL_HELP),
    Column("epoch time (s)", "%.2f"),
)
AFTER_DEVICES = (
    Column("memory imbalance", "%.3f"),
    Column(
        "loss matches baseline to step",
        "%d",
        "Last step up to which train/loss stays within 0.1% of the baseline's.",
    ),
    Column("final train loss", "%.4f"),
    Column("final val loss", "%.4f"),
    Column("final val acc", "%.4f"),
)
# Why one mode is faster, last: mean utilisation of each GPU ("util % gpu<i>", physical index), then
# these.
WHY = (
    Column(
        "mean util %",
        "%.0f",
        "Mean utilisation of the run's GPUs while it trained (NVML samples); "
        "on a CPU run its CPU share: its processes' CPU time over the cores it was given.",
    ),
    Column(
        "comm exposed % of step",
        "%.0f",
        "Communication the step waited for, as a share of the step "
        "(profiled runs only: Profile steps on the Launch page).",
    ),
)
PEAK_PREFIX = "peak MiB "
PEAK_FORMAT = "%.0f"
UTIL_PREFIX = "util % "
COLUMNS_BEFORE_DEVICES = [c.name for c in BEFORE_DEVICES]
COLUMNS_AFTER_DEVICES = [c.name for c in AFTER_DEVICES]
COLUMNS_WHY = [c.name for c in WHY]
TEXT_COLUMNS = (
    "run",
    "figures",
    "mode",
    "effective mode",
    "devices",
    "speedup of",
    "scaling",
    *noise.NOISE_COLUMNS,
)  # all others are numbers (NaN = unknown)
_BY_NAME = {c.name: c for c in BEFORE_DEVICES + AFTER_DEVICES + WHY}


def _column(name: str) -> Column | None:
    if name.startswith(PEAK_PREFIX):
        # physical gpu<i>: NVML's samples; cuda<i>: the trainer's
        nvml = name[len(PEAK_PREFIX) :].startswith("gpu")
        return Column(
            name, PEAK_FORMAT, derived_text.PEAK_NVML_HELP if nvml else derived_text.PEAK_HELP
        )
    if name.startswith(UTIL_PREFIX):
        return Column(name, PEAK_FORMAT)
    return _BY_NAME.get(name)


def column_formats(columns: Iterable[str]) -> dict[str, Column]:
    """The formatted columns among ``columns`` (a table's), peak memory columns included."""
    return {name: col for name in columns if (col := _column(name)) is not None and col.format}


def text_help(columns: Iterable[str]) -> dict[str, str]:
    """The help of the text columns among ``columns`` that have one."""
    return {
        name: col.help
        for name in columns
        if name in TEXT_COLUMNS and (col := _column(name)) is not None and col.help
    }
