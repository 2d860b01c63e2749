"""A ``Comparison`` as the Compare table: one row per run, its columns (name, order, printf format
and help, written once here for the page, the CSV and the HTML report), the speedup cells coloured
by their verdict, the CSV bytes, and the table of a sweep's repeats.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from lab.views.compare.comparison import Comparison, Row
from lab.views.compare.figures import device_order
from lab.views.compare.groups import Group
from lab.views.compare.verdict import FASTER, SLOWER

HOW_TO_READ = """\
**Speedup** is a run's steady-state throughput (samples per second, without the
warm-up steps) divided by the baseline's. **Scaling efficiency** is the speedup
divided by the number of devices (relative to the baseline's; under weak
scaling, throughput per device against the baseline's): 1.0 means every
added device paid for itself fully, 0.5 means half of it went to communication,
waiting or a bottleneck such as DataParallel's single process. **Memory
imbalance** is (max − min) / mean of the per-device peak memory: DataParallel
keeps the model, the outputs and the loss on the first device, so its first
device holds more (imbalance well above 0), while DDP's ranks hold about the
same (close to 0). Steady throughput and memory are only comparable between
runs of the same model, dataset, global batch and precision: the warnings say
when they are not."""


@dataclass(frozen=True)
class Column:
    """A column of the table and how the page shows it (printf ``format``; None: as is)."""

    name: str
    format: str | None = None
    help: str | None = None


SPEEDUP_CI, EFFICIENCY_CI, VERDICT, MACHINE = (
    "speedup (interval, coverage)",
    "efficiency (interval)",
    "noise",
    "machine",
)
NOISE_COLUMNS = (SPEEDUP_CI, EFFICIENCY_CI, VERDICT, MACHINE)
PEAK_PREFIX = "peak MiB "
PEAK_FORMAT = "%.0f"
UTIL_PREFIX = "util % "
PEAK_HELP = "Peak memory the trainer's allocator held on the device (torch's max_memory_allocated)."
PEAK_NVML_HELP = (
    "Derived: the highest of NVML's used-memory samples of physical GPU <i> (sys/): everything the "
    "driver counts on it, the CUDA context included; not the allocator's peak, and not comparable "
    "with a cuda<i> column."
)
# Fixed columns, in order; one "peak MiB <device>" column per device seen in any chosen run goes
# between the first two groups, one "util % gpu<i>" column per GPU (physical index) before WHY.
BEFORE_DEVICES = (
    Column("run"),
    Column(
        "figures",
        None,
        "measured: the trainer's own figures (summary.json). derived: the run has no summary.json "
        "(a user's script, foreign logs, a run that did not finish), so its figures come from its "
        "event files and the supervisor's records: throughput from the tag you pick, steps/s from "
        "its loss tag, wall time from the supervisor's start and end, peak memory from NVML's "
        "samples.",
    ),
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
    Column(
        "speedup of",
        None,
        "What the speedup divides: samples/s where the run and the baseline both have them; else "
        "steps/s of their loss tags, which equals the samples/s speedup only if a step trains the "
        "same global batch; 'X against the baseline's samples/s' when a picked tag X is the run's "
        "throughput.",
    ),
    Column("speedup", "%.2f"),
    Column("efficiency", "%.2f"),
    Column(
        "scaling",
        None,
        "strong: the baseline's global batch (the same training); weak: its batch per device "
        "(efficiency = throughput per device against the baseline's). Recorded by the sweep, "
        "else read from the batches.",
    ),
    Column(
        SPEEDUP_CI,
        None,
        "Its group's speedup against the baseline group (the ratio of the groups' median "
        "throughputs) with its interval and that interval's real coverage: over the pairs of runs "
        "(range of 3×3 pairs, 90%) with repeats; one run against one run, its logging windows "
        "only (no run-to-run evidence, so never faster or slower). The baseline group's rows "
        "show its own spread.",
    ),
    Column(
        EFFICIENCY_CI,
        None,
        "Its group's speedup / (devices / baseline devices), with the same interval scaled.",
    ),
    Column(
        VERDICT,
        None,
        "Its group's verdict: 'faster' or 'slower' only when the whole interval lies beyond the "
        "noise margin around 1.0 (the machine's measured run-to-run noise, else 10%), else "
        "'within noise'; 'check: superlinear' when a strong-scaling efficiency is above 1.1.",
    ),
    Column(
        MACHINE,
        None,
        "'busy' when other processes used the machine during the run (see the warning).",
    ),
    Column(
        "wall time (s)",
        "%.1f",
        "Seconds the run took, start-up included: the supervisor's start to end (status.json), the "
        "same for every kind of run; a trainer run by hand: its own wall_time_s; foreign logs: the "
        "span of its sys/ samples.",
    ),
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
# why one mode is faster, last
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
COLUMNS_BEFORE_DEVICES = [c.name for c in BEFORE_DEVICES]
COLUMNS_AFTER_DEVICES = [c.name for c in AFTER_DEVICES]
COLUMNS_WHY = [c.name for c in WHY]
# all others are numbers (NaN = unknown)
TEXT_COLUMNS = (
    "run",
    "figures",
    "mode",
    "effective mode",
    "devices",
    "speedup of",
    "scaling",
    *NOISE_COLUMNS,
)
_BY_NAME = {c.name: c for c in BEFORE_DEVICES + AFTER_DEVICES + WHY}
GREEN, RED = "background-color: #d8f0dc", "background-color: #f8dada"


def _column(name: str) -> Column | None:
    if name.startswith(PEAK_PREFIX):
        # physical gpu<i>: NVML's samples; cuda<i>: the trainer's
        nvml = name[len(PEAK_PREFIX) :].startswith("gpu")
        return Column(name, PEAK_FORMAT, PEAK_NVML_HELP if nvml else PEAK_HELP)
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


def _noise_cells(row: Row, group: Group | None) -> dict[str, str]:
    """Its group's speedup and efficiency with their intervals and coverage, the verdict (the
    cards' own), the machine."""
    machine = "" if row.busy is None else ("busy" if row.busy else "quiet")
    cells = {SPEEDUP_CI: "", EFFICIENCY_CI: "", VERDICT: row.verdict, MACHINE: machine}
    if group is None:
        return cells
    if group.is_baseline:
        return {**cells, SPEEDUP_CI: f"baseline: {group.spread_text()}"}
    if group.speedup is None:
        return cells
    eff = ""
    if group.efficiency is not None:
        f = group.efficiency / group.speedup
        eff = f"{group.efficiency:.2f}" + (
            "" if group.low is None else f" ({group.low * f:.2f}–{group.high * f:.2f})"
        )
    return {**cells, SPEEDUP_CI: group.speedup_text(), EFFICIENCY_CI: eff}


def _cells(row: Row, devices: list[str], gpus: list[str], group: Group | None) -> dict[str, Any]:
    m, sp = row.figures, row.speed
    return {
        "run": row.name,
        "figures": m.figures,
        "mode": m.mode,
        "effective mode": m.effective_mode,
        "devices": ", ".join(m.devices),
        "world size": m.world_size,
        "global batch": m.global_batch,
        "per-device batch": m.per_device_batch,
        "throughput (samples/s)": m.throughput,
        "steps/s": m.steps_per_sec,
        "speedup of": sp.of,
        "speedup": sp.speedup,
        "efficiency": sp.efficiency,
        "scaling": row.scaling,
        **_noise_cells(row, group),
        "wall time (s)": m.wall_time_s,
        "epoch time (s)": m.epoch_time_s,
        **{PEAK_PREFIX + d: m.peaks.get(d) for d in devices},
        "memory imbalance": m.imbalance,
        "loss matches baseline to step": row.loss_agreement,
        "final train loss": m.final_train_loss,
        "final val loss": m.final_val_loss,
        "final val acc": m.final_val_acc,
        **{UTIL_PREFIX + g: m.utilisation.per_gpu.get(g) for g in gpus},
        "mean util %": m.utilisation.overall,
        "comm exposed % of step": m.comm_exposed_pct,
    }


# a run with --compile on: the first steps' compile time (summary.json's compile_s), which its
# throughput leaves out; the column is there only when a chosen run compiled
COMPILE = "compile (s, left out of throughput)"


def frame(c: Comparison) -> pd.DataFrame:
    """The table: one row per run, the columns above; numbers stay numbers (NaN for unknown) so
    the CSV and sorting work."""
    if not c.rows:
        return pd.DataFrame(columns=COLUMNS_BEFORE_DEVICES + COLUMNS_AFTER_DEVICES + COLUMNS_WHY)
    devices = sorted({d for r in c.rows for d in r.figures.peaks}, key=device_order)
    gpus = sorted({g for r in c.rows for g in r.figures.utilisation.per_gpu}, key=device_order)
    df = pd.DataFrame(
        [_cells(r, devices, gpus, c.group_of(r.key)) for r in c.rows],
        columns=COLUMNS_BEFORE_DEVICES
        + [PEAK_PREFIX + d for d in devices]
        + COLUMNS_AFTER_DEVICES
        + [UTIL_PREFIX + g for g in gpus]
        + COLUMNS_WHY,
    )
    compiled = [(r.run.summary or {}).get("compile_s") for r in c.rows]
    if any(v is not None for v in compiled):  # --compile on: its compile time, shown apart
        df[COMPILE] = compiled
    for col in df.columns:
        if col not in TEXT_COLUMNS:
            df[col] = pd.to_numeric(df[col], errors="coerce")
    return df


def table_csv(df: pd.DataFrame) -> bytes:
    """The table as UTF-8 CSV bytes, for a download button."""
    buf = io.StringIO()
    df.to_csv(buf, index=False)
    return buf.getvalue().encode("utf-8")


def emphasis(table: pd.DataFrame) -> list[str]:
    """Per row, the CSS of its speedup cells: green faster, red slower, none within noise or
    unknown."""
    if VERDICT not in table.columns:
        return [""] * len(table)
    return [GREEN if v == FASTER else RED if v == SLOWER else "" for v in table[VERDICT]]


def styled(table: pd.DataFrame, formats: Mapping[str, str], escape: bool = False) -> Any:
    """The table as a pandas Styler: printf ``formats`` per column, speedup cells coloured by
    ``emphasis``.

    ``escape``: HTML-escape the text cells (for an HTML page; Streamlit shows text as is).
    """
    css = emphasis(table)
    cols = [c for c in (SPEEDUP_CI, EFFICIENCY_CI, VERDICT) if c in table.columns]
    sty = table.style.format(
        {c: (lambda f: lambda v: f % v)(f) for c, f in formats.items() if c in table.columns},  # noqa: B023
        na_rep="–",
        escape="html" if escape else None,
    )
    if cols:
        sty = sty.apply(lambda col: css, subset=cols, axis=0)
    return sty


def repeats_frame(c: Comparison) -> pd.DataFrame | None:
    """Each repeated mode's median over its repeats, as the page's table; None when no mode was
    repeated."""
    if not c.by_mode:
        return None
    return pd.DataFrame(
        [
            {
                "sweep": g["sweep_id"],
                "mode": g["mode"],
                "repeats": g["repeats"],
                "median throughput (samples/s)": round(g["median"], 1),
                "min": round(g["min"], 1),
                "max": round(g["max"], 1),
                "spread across repeats (%)": round(g["spread_pct"], 1),
                "speedup of medians": None if g["speedup"] is None else round(g["speedup"], 3),
                "interval": ""
                if g.get("ci_low") is None
                else f"{g['ci_low']:.2f}–{g['ci_high']:.2f}, {g['coverage_text']}",
                "verdict": g.get("verdict", ""),
            }
            for g in c.by_mode
        ]
    )
