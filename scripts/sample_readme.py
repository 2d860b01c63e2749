"""sample_data/runs/README.md for ``scripts/record_sample_runs.py``: one section per sample sweep.

The folder ships three sweeps side by side, each recorded by its own mode of the record script:
the Compare-modes sweep (runs named ``sample-*``: single, DataParallel and DDP at one device
count), the device-count sweep (``scaling-*``: single and DDP at 1 and 2 gloo processes) and the
memory-trade sweep (``fsdp-*``: resnet18, single, DDP and FSDP at 1 and 2). Each recording
rewrites its own section (between ``<!-- sweep: STEM -->`` and ``<!-- end sweep: STEM -->``) and
keeps the other's, so recording one never loses the other's description. Every figure is what the
Compare page computes from the recorded runs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from lab.views.compare import memory as compare_memory
from lab.views.compare import table as compare_table
from lab.views.compare.comparison import Comparison
from lab.views.compare.spread import over_repeats

MODES_STEM, SCALING_STEM, FSDP_STEM = "sample", "scaling", "fsdp"
ORDER = (MODES_STEM, SCALING_STEM, FSDP_STEM)
STEADY = math.log(1.15)  # two runs of the same work within 15% of each other: a steady machine
HEADER = """# Sample runs

Real runs recorded by `scripts/record_sample_runs.py` with this project's own
launcher (`lab.engine.launch.sweeps.launch_sweep`), so that the Compare page
has something to show on a fresh clone. Nothing here was written by hand: every
figure below is what the trainer and supervisor recorded and what the Compare
page computes from them. Three sweeps, each in its own section:

- **Compare modes** (runs `sample-*`): single, DataParallel and DDP at the same
  global batch, three times each, and one weak-scaling DDP run.
- **Device counts** (runs `scaling-*`): single, and DDP with 1 and 2 gloo
  processes, three times each: the Compare page's scaling chart.
- **Memory against speed** (runs `fsdp-*`): resnet18, single, and DDP and FSDP
  with 1 and 2 gloo processes: the scaling chart with an fsdp curve and the
  memory-per-device chart. It is the newest sweep, so the Compare page opens on it.

Each is re-recorded on its own (`python scripts/record_sample_runs.py` for the
first, `... --devices 1,2` for the second, `... --fsdp` for the third); the
other sweeps' runs and sections are kept.
"""


def _notes(c: Comparison) -> tuple[str, str]:
    """A section's warnings and its repeats (each mode's median and spread), as Markdown lists."""
    warns = "\n".join(f"- {w.message}" for w in c.warnings) or "- none"
    repeats = "\n".join(
        f"- {g['mode']}: median {g['median']:.0f} samples/s over {g['repeats']} runs (min "
        f"{g['min']:.0f}, max {g['max']:.0f}, spread {g['spread_pct']:.1f}%)"
        for g in c.by_mode
    )
    return warns, repeats


@dataclass(frozen=True)
class Recording:
    """How a sweep was recorded: the facts no run file holds."""

    sweep_id: str
    argv: list[str]
    started: str
    took_s: float
    loads: tuple[float, float]


def _marks(stem: str) -> tuple[str, str]:
    return f"<!-- sweep: {stem} -->", f"<!-- end sweep: {stem} -->"


def sections(text: str) -> dict[str, str]:
    """The marked sections of a README, by stem (markers included)."""
    out = {}
    for stem in ORDER:
        start, end = _marks(stem)
        m = re.search(re.escape(start) + r".*?" + re.escape(end), text, flags=re.S)
        if m:
            out[stem] = m.group(0)
    return out


def merged(old: str, stem: str, body: str) -> str:
    """The README with ``stem``'s section set to ``body`` and the other sections of ``old`` kept."""
    start, end = _marks(stem)
    found = sections(old)
    found[stem] = f"{start}\n{body.strip()}\n{end}"
    return HEADER + "".join(f"\n{found[s]}\n" for s in ORDER if s in found)


def cell(v) -> str:
    if not isinstance(v, float):
        return str(v)
    if v != v:
        return "–"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def markdown_table(table, cols: list[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in table[[c for c in cols if c in table.columns]].iterrows():
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(lines)


def by_mode(pairs) -> dict:
    """key -> the median throughput over that key's repeats."""
    groups: dict = {}
    for key, tp in pairs:
        groups.setdefault(key, []).append(tp)
    return {k: (over_repeats(v) or {}).get("median") for k, v in groups.items()}


def consistency(table) -> str:
    """single and DP-fallen-back-to-single do the same work: their throughput ratio shows the
    noise."""
    strong = table[table["scaling"] != "weak"] if "scaling" in table.columns else table
    medians = by_mode(
        ((r["mode"], r["effective mode"]), r["throughput (samples/s)"])
        for _, r in strong.iterrows()
    )
    a, b = medians.get(("single", "single")), medians.get(("dp", "single"))
    if not a or not b:
        return ""
    verdict = "steady" if abs(math.log(b / a)) <= STEADY else "NOT steady (the machine was busy)"
    return (
        f"Noise check: the single run and the DP run that fell back to single did the same work at "
        f"{a:.0f} and {b:.0f} samples/s (ratio {b / a:.2f}): the machine was {verdict}."
    )


def _when(rec: Recording) -> str:
    return (
        f"started {rec.started}, {rec.took_s:.0f} s for the whole sweep; 1-minute load\n"
        f"  average {rec.loads[0]:.2f} before, {rec.loads[1]:.2f} after"
    )


def modes_section(runs: list, c: Comparison, rec: Recording, cfg) -> str:
    """The Compare-modes sweep's section: the Compare table, anatomy, repeats and warnings."""
    table = compare_table.frame(c)
    cols = [
        "run",
        "mode",
        "effective mode",
        "devices",
        "global batch",
        "throughput (samples/s)",
        compare_table.SPEEDUP_CI,
        compare_table.EFFICIENCY_CI,
        compare_table.VERDICT,
        compare_table.MACHINE,
        "scaling",
        "comm exposed % of step",
        "memory imbalance",
        "final val acc",
    ]
    warns, repeats = _notes(c)
    recorded_on = runs[0].recorded_on if runs else "unknown"
    anatomy = "\n".join(f"- {line}" for line in c.anatomy)
    weak = [r for r in runs if r.scaling == "weak"]
    repeats_n = max(1, sum(1 for r in runs if r.scaling != "weak") // 3)
    weak_line = (
        f", and DDP with 2 gloo processes at {cfg.batch_size} per process "
        f"({weak[0].option('batch_size')} global, weak scaling)"
        if weak
        else ""
    )
    return f"""## Compare modes: single, DataParallel and DDP (sweep `{rec.sweep_id}`)

{len(runs)} real runs of sweep `{rec.sweep_id}`.

- **Where:** {recorded_on}
- **When:** {_when(rec)}
- **Command:** `python {" ".join(rec.argv)}`
- **What:** tinycnn on the digits set (sample_data/digits), {cfg.epochs} epochs,
  seed {cfg.seed}, `--checkpoint none`, profiled over steps `{cfg.profile_steps or "none"}`;
  single, DataParallel and DDP with 2 gloo processes at global batch {cfg.batch_size}
  (strong scaling), {repeats_n} time(s) each,
  taking turns{weak_line}; every run one after another (never side by side).

On a machine without GPUs DataParallel has nothing to split over, so the
trainer falls back to one device and says so (`effective_mode` in
summary.json); the Compare page shows that as a fairness warning. Throughput
on a shared CPU is noisy: these figures illustrate the page, they are not a
benchmark of DP or DDP.

### What the Compare page computes from them

{markdown_table(table, cols)}

Where the time of a step goes (the Compare page's *Anatomy of a step*):
{anatomy or "- no run was profiled"}

Repeats (each mode's median over its runs):
{repeats or "- one run per mode"}

Warnings:
{warns}

{consistency(table)}

Re-record with `python scripts/record_sample_runs.py` (about a minute on 2
cores, more while it waits for a quiet machine or re-records a noisy sweep);
the previous runs are replaced only when all new runs succeed.
"""


def _interval(fig: dict | None, centre: str, fmt: str, unit: str = "") -> str:
    if not fig:
        return "–"
    cov = f", {fig['coverage_text']}" if fig.get("coverage_text") else ""
    return f"{fig[centre]:{fmt}}{unit} ({fig['ci_low']:{fmt}}–{fig['ci_high']:{fmt}}{cov})"


def scaling_table(curve) -> str:
    """The Compare page's scaling curve (``Comparison.scaling_curve``) as a markdown table."""
    rate = curve[0]["rate"] if curve else "samples/s"
    lines = [
        f"| mode | devices | runs | throughput ({rate}, median of the repeats, its interval) "
        "| speedup vs single × 1 (interval, coverage) | efficiency (speedup / devices) | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in sorted(curve, key=lambda p: (p["mode"] != "single", p["mode"], p["devices"])):
        lines.append(
            f"| {p['mode']} | {p['devices']} | {len(p['runs'])} "
            f"| {_interval(p['throughput'], 'median', '.0f')} "
            f"| {_interval(p['speedup'], 'value', '.2f', '×')} "
            f"| {_interval(p['efficiency'], 'value', '.2f')} "
            f"| {(p['speedup'] or {}).get('verdict') or '–'} |"
        )
    return "\n".join(lines)


def scaling_noise(c: Comparison) -> str:
    """The single runs repeat the same work: how far apart they are shows how steady the machine
    was (the record script's noise check for a device-count sweep)."""
    single = next((g for g in c.by_mode if g["mode"] == "single"), None)
    if not single or not single["min"]:
        return ""
    ratio = single["max"] / single["min"]
    verdict = "steady" if math.log(ratio) <= STEADY else "NOT steady (shared with other work)"
    return (
        f"Noise check: the {single['repeats']} single runs did the same work at "
        f"{single['min']:.0f} to {single['max']:.0f} samples/s (fastest / slowest "
        f"{ratio:.2f}): the machine was {verdict}."
    )


def scaling_section(runs: list, c: Comparison, rec: Recording, cfg, counts: list[int]) -> str:
    """The device-count sweep's section: the scaling table, the runs, repeats and warnings."""
    table = compare_table.frame(c)
    cols = [
        "run",
        "mode",
        "devices",
        "global batch",
        "throughput (samples/s)",
        compare_table.SPEEDUP_CI,
        compare_table.EFFICIENCY_CI,
        compare_table.MACHINE,
        "comm exposed % of step",
        "final val acc",
    ]
    warns, repeats = _notes(c)
    recorded_on = runs[0].recorded_on if runs else "unknown"
    repeats_n = max(1, sum(1 for r in runs if r.option("mode") == "single"))
    head = f"Device counts: single and DDP at {' and '.join(map(str, counts))} gloo processes"
    return f"""## {head} (sweep `{rec.sweep_id}`)

{len(runs)} real runs of sweep `{rec.sweep_id}`, a device-count sweep on the
**CPU with gloo**: the Compare page draws it as throughput and efficiency
against the device count (its *Scaling* charts and table).

- **Where:** {recorded_on} (CPU only: a "device" here is a DDP process with
  the gloo backend, not a GPU)
- **When:** {_when(rec)}
- **Command:** `python {" ".join(rec.argv)}`
- **What:** tinycnn on the digits set (sample_data/digits), {cfg.epochs} epochs,
  seed {cfg.seed}, `--checkpoint none`, profiled over steps `{cfg.profile_steps or "none"}`;
  modes single,ddp × device counts {",".join(map(str, counts))} (single runs at 1), global
  batch {cfg.batch_size} in every run (strong scaling), {repeats_n} time(s) each, taking
  turns (single, DDP × 1, DDP × 2, single, …), every run one after another (never side by
  side): the same plan as `python -m lab sweep --modes single,ddp --devices
  {",".join(map(str, counts))} --repeats {repeats_n}`.

The machine has few cores and was shared while recording: DDP's processes
compete with each other and with other work for them, so these figures
illustrate the page, they are not a benchmark of DDP.

### The scaling the Compare page computes from them

{scaling_table(c.scaling_curve)}

Throughput is each group's median of its runs' steady medians; speedup and
efficiency are against the single runs on one device (the ideal is N × single:
efficiency 1.0).

### The runs

{markdown_table(table, cols)}

Repeats (each mode's median over its runs):
{repeats or "- one run per mode"}

Warnings:
{warns}

{scaling_noise(c)}

Re-record with `python scripts/record_sample_runs.py --devices {",".join(map(str, counts))}
--repeats {repeats_n}` (the Compare-modes sweep above is kept); the previous
device-count runs are replaced only when all new runs succeed.
"""


def memory_trade(runs: list) -> str:
    """The memory-per-device chart's points as a table, and its sentence."""
    points = compare_memory.frontier(runs)
    rows = "\n".join(
        f"| {p.mode} | {p.devices} | {p.throughput:.0f} | {p.memory_mib:.0f} "
        f"| {'measured' if p.measured else 'estimate'} | {p.runs} |"
        for p in points
    )
    said = " ".join(compare_memory.trade(points)) or "No fsdp point has a ddp point beside it."
    return (
        "| mode | devices | throughput (samples/s) | peak per device (MiB) | peak is | runs |\n"
        f"| --- | --- | --- | --- | --- | --- |\n{rows}\n\n{said}"
    )


def fsdp_section(runs: list, c: Comparison, rec: Recording, cfg, counts: list[int]) -> str:
    """The memory-trade sweep's section: the memory points, the scaling table, the runs."""
    table = compare_table.frame(c)
    cols = ["run", "mode", "devices", "throughput (samples/s)", compare_table.SPEEDUP_CI,
            compare_table.MACHINE, "final val acc"]  # fmt: skip
    warns, repeats = _notes(c)
    recorded_on = runs[0].recorded_on if runs else "unknown"
    repeats_n = max(1, sum(1 for r in runs if r.option("mode") == "single"))
    n = ",".join(map(str, counts))
    head = f"Memory against speed: {cfg.model}, single, DDP and FSDP at {n}"
    return f"""## {head} (sweep `{rec.sweep_id}`)

{len(runs)} real runs of sweep `{rec.sweep_id}` on the **CPU with gloo**: the Compare page draws
the scaling view with an fsdp curve and the chart of peak memory per device against throughput.

- **Where:** {recorded_on} (CPU only: a "device" here is a process with the gloo backend)
- **When:** {_when(rec)}
- **Command:** `python {" ".join(rec.argv)}`
- **What:** {cfg.model} at {cfg.image_size} px on the digits set, {cfg.epochs} epoch(s), seed
  {cfg.seed}, `--checkpoint none`, global batch {cfg.batch_size} in every run (strong scaling),
  {repeats_n} time(s) each, taking turns: the plan of `python -m lab sweep --modes
  single,ddp,fsdp --devices {n} --model {cfg.model} --image-size {cfg.image_size}`.
- **Memory measured:** the rise of each process's resident set, with
  `MALLOC_MMAP_THRESHOLD_=65536` in the runs' environment so that large freed buffers go back
  to the system and the peak follows what was live (glibc keeps freed heap otherwise, and
  FSDP's per-block buffers fragment it: the saving then hides in the kept heap).

The machine has few cores and was shared: these figures illustrate the page, they are not a
benchmark of FSDP. Under gloo FSDP waits for every all-gather and reduce-scatter, so it is slower
than DDP here; on GPUs with NCCL it overlaps them with compute.

### Memory per device against throughput

{memory_trade(runs)}

### The scaling the Compare page computes from them

{scaling_table(c.scaling_curve)}

### The runs

{markdown_table(table, cols)}

Repeats (each mode's median over its runs):
{repeats or "- one run per mode"}

Warnings:
{warns}

Re-record with `python scripts/record_sample_runs.py --fsdp --devices {n} --repeats {repeats_n}`
(the other sweeps are kept).
"""
