"""Record the sample runs shipped in sample_data/runs with this project's own launcher.

Runs of tinycnn on the digits set — single, DataParallel and 2-rank DDP
with the same seed and global batch (strong scaling), each ``--repeats``
times and interleaved (single, dp, ddp, single, …:
``lab.engine.sweep.plan.interleaved``), and a 2-rank DDP run
with the same batch per device (weak scaling: twice the global batch), on the
CPU with gloo (``lab.engine.sweep.plan.compare_modes_configs`` on a machine seen as
GPU-less), each profiled over a few steps (``--profile-steps``) so that the
Compare page draws the anatomy of their steps — are started as one sweep with
``lab.engine.launch.launcher.launch_sweep`` (one after another, never side by side, so the
throughputs are not disturbed by each other), waited for, labelled in run.json
``recorded_on`` (machine, cores, torch version), and described in
``sample_data/runs/README.md``. Nothing in those folders is written by hand:
every figure is what the trainer and supervisor recorded. The previous sample
runs are kept until the new ones have all succeeded.

    python scripts/record_sample_runs.py [--epochs 3] [--batch-size 64] [--repeats 3]
      [--profile-steps 20:25]
                                         [--no-weak] [--out sample_data/runs]

Record on a quiet machine: the throughput figures are only as steady as the
CPU was.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shutil
import sys
import time
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lab.engine import registry  # noqa: E402
from lab.engine.launch import launcher  # noqa: E402
from lab.engine.launch.config import RunConfig  # noqa: E402
from lab.engine.sweep.plan import STRONG, WEAK, compare_modes_configs, interleaved  # noqa: E402
from lab.events import LogdirReader  # noqa: E402
from lab.runfolder import FINAL_STATES, SAMPLE_RUNS, now_iso, read_json, write_json_atomic  # noqa: E402
from lab.views.compare import runs as compare_runs  # noqa: E402
from lab.views.compare import table as compare_table  # noqa: E402
from lab.views.compare.comparison import compare  # noqa: E402
from lab.views.compare.figures import run_figures  # noqa: E402
from lab.views.compare.spread import over_repeats  # noqa: E402

MAX_BYTES = 2_000_000


def _runs(out: Path, run_ids: list[str], sample: bool = False) -> list[compare_runs.CompareRun]:
    """The recorded runs as Compare reads them (the registry's records), in order; missing ones
    left out."""
    records = {r.run_id: r for r in registry.list_runs(out)}
    return [compare_runs.from_record(records[i], sample=sample) for i in run_ids if i in records]


def _label(run_dir: Path, torch_version: str) -> str:
    meta = read_json(run_dir / "run.json") or {}
    label = str(meta.get("recorded_on") or "CPU (gloo)")
    if "torch" not in label:
        label = f"{label}, torch {torch_version}"
        meta["recorded_on"] = label
        write_json_atomic(run_dir / "run.json", meta)
    return label


def _wait_quiet(max_load: float, wait_s: float) -> float:
    """Wait (up to ``wait_s``) for the 1-minute load average to drop below ``max_load``; return
    it."""
    end = time.monotonic() + wait_s
    load = os.getloadavg()[0]
    while load >= max_load and time.monotonic() < end:
        print(f"waiting for a quiet machine: load average {load:.2f} >= {max_load}", flush=True)
        time.sleep(10)
        load = os.getloadavg()[0]
    if load >= max_load:
        print(
            f"warning: starting with load average {load:.2f}: throughput figures will be noisy",
            file=sys.stderr,
        )
    return load


def _by_mode(pairs) -> dict:
    """(mode, effective mode) -> the median throughput over that mode's repeats."""
    groups: dict = {}
    for key, tp in pairs:
        groups.setdefault(key, []).append(tp)
    return {k: (over_repeats(v) or {}).get("median") for k, v in groups.items()}


def _consistency(table) -> str:
    """single and DP-fallen-back-to-single do the same work: their throughput ratio shows the
    noise."""
    strong = table[table["scaling"] != "weak"] if "scaling" in table.columns else table
    by_mode = _by_mode(
        ((r["mode"], r["effective mode"]), r["throughput (samples/s)"])
        for _, r in strong.iterrows()
    )
    a, b = by_mode.get(("single", "single")), by_mode.get(("dp", "single"))
    if not a or not b:
        return ""
    verdict = (
        "steady"
        if abs(math.log(b / a)) <= math.log(1.15)
        else "NOT steady (the machine was busy): re-record"
    )
    return (
        f"Noise check: the single run and the DP run that fell back to single did the same work at "
        f"{a:.0f} and {b:.0f} samples/s (ratio {b / a:.2f}): the machine was {verdict}."
    )


def _cell(v) -> str:
    if not isinstance(v, float):
        return str(v)
    if v != v:
        return "–"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _readme(
    out: Path,
    run_ids: list[str],
    sweep_id: str,
    argv: list[str],
    started: str,
    took_s: float,
    loads: tuple[float, float],
    cfg: RunConfig,
) -> str:
    runs = _runs(out, run_ids, sample=True)
    c = compare(runs, scalars=compare_runs.read_scalars(runs, LogdirReader))
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
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in table[cols].iterrows():
        cells = [_cell(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    warns = "\n".join(f"- {w.message}" for w in c.warnings) or "- none"
    repeats = "\n".join(
        f"- {g['mode']}: median {g['median']:.0f} samples/s over {g['repeats']} runs (min "
        f"{g['min']:.0f}, "
        f"max {g['max']:.0f}, spread {g['spread_pct']:.1f}%)"
        for g in c.by_mode
    )
    recorded_on = runs[0].recorded_on if runs else "unknown"
    anatomy = "\n".join(f"- {line}" for line in c.anatomy)
    weak = [r for r in runs if r.scaling == "weak"]
    repeats_n = max(1, sum(1 for r in runs if r.scaling != "weak") // 3)
    weak_line = (
        (
            f", and DDP with 2 gloo processes at {cfg.batch_size} per process "
            f"({weak[0].option('batch_size')} "
            "global, weak scaling)"
        )
        if weak
        else ""
    )
    return f"""# Sample runs

{len(runs)} real runs recorded by `scripts/record_sample_runs.py` with this
project's own launcher (`lab.engine.launch.launcher.launch_sweep`, sweep `{sweep_id}`), so
that the Compare page has something to show on a fresh clone. Nothing here
was written by hand.

- **Where:** {recorded_on}
- **When:** started {started}, {took_s:.0f} s for the whole sweep; 1-minute load
  average {loads[0]:.2f} before, {loads[1]:.2f} after
- **Command:** `python {" ".join(argv)}`
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

## What the Compare page computes from them

{chr(10).join(lines)}

Where the time of a step goes (the Compare page's *Anatomy of a step*):
{anatomy or "- no run was profiled"}

Repeats (each mode's median over its runs):
{repeats or "- one run per mode"}

Warnings:
{warns}

{_consistency(table)}

Re-record with `python scripts/record_sample_runs.py` (about a minute on 2
cores, more while it waits for a quiet machine or re-records a noisy sweep);
the previous runs are replaced only when all new runs succeed.
"""


def _configs(base: RunConfig, weak: bool, repeats: int) -> tuple[list[RunConfig], list[str]]:
    """The strong-scaling trio ``repeats`` times, interleaved, and with ``weak`` a weak-scaling DDP
    run.

    CPU/gloo on purpose, even where GPUs exist.
    """
    configs = interleaved(compare_modes_configs(base, 0), repeats)
    scalings = [STRONG] * len(configs)
    if weak:
        ddp = next(c for c in compare_modes_configs(base, 0, scaling=WEAK) if c.mode == "ddp")
        configs.append(dataclasses.replace(ddp, name=f"{base.name}-ddp-weak"))
        scalings.append(WEAK)
    return configs, scalings


def _record(
    out: Path, configs: list[RunConfig], scalings: list[str], timeout_s: float
) -> tuple[str, list[str]]:
    """One sweep into ``out``, waited for; raises RuntimeError (nothing left running) unless all
    succeed."""
    run_ids: list[str] = []
    try:
        sweep_id, run_ids = launcher.launch_sweep(configs, runs_dir=out, scaling=scalings)
        print(f"sweep {sweep_id}: {', '.join(run_ids)}", flush=True)
        states = {rid: launcher.wait(rid, out, timeout_s=timeout_s) for rid in run_ids}
        for rid, state in states.items():
            print(f"  {rid}: {state}", flush=True)
        bad = {r: s for r, s in states.items() if s != "succeeded"}
        if bad:
            raise RuntimeError(f"not all runs succeeded ({bad}); see {out}/<run>/stdout.log")
        return sweep_id, run_ids
    except BaseException:
        for rid in run_ids:  # failed or interrupted: leave nothing running behind us
            if launcher.wait(rid, out, timeout_s=0) not in FINAL_STATES:
                launcher.stop(rid, out)
        raise


def _noise(out: Path, run_ids: list[str]) -> float:
    """|log| of the single / DP-as-single throughput ratio: 0 on a steady machine."""
    m = _by_mode(
        ((x.mode, x.effective_mode), x.throughput) for x in map(run_figures, _runs(out, run_ids))
    )
    a, b = m.get(("single", "single")), m.get(("dp", "single"))
    return abs(math.log(b / a)) if a and b else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=SAMPLE_RUNS)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--log-every", type=int, default=2)
    ap.add_argument(
        "--profile-steps",
        default="20:25",
        metavar="A:B",
        help="profile optimizer steps A to B-1 of every run ('' for none); B-1 must not pass the "
        "shortest "
        "run's last step (the weak DDP run takes half the steps per epoch)",
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run every mode N times, taking turns (3 shows the spread between runs)",
    )
    ap.add_argument(
        "--no-weak",
        dest="weak",
        action="store_false",
        help="leave out the weak-scaling DDP run (same batch per device, twice the global batch)",
    )
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for each run")
    ap.add_argument(
        "--max-load",
        type=float,
        default=1.0,
        help="start once the 1-minute load average is below this (other work skews throughput)",
    )
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=300.0,
        help="seconds to wait for that, then start anyway",
    )
    ap.add_argument(
        "--tries",
        type=int,
        default=3,
        help="record again while the noise check fails, keeping the steadiest sweep",
    )
    args = ap.parse_args(argv)

    out = args.out.resolve()
    base = RunConfig(
        model="tinycnn",
        dataset="digits",
        batch_size=args.batch_size,
        epochs=args.epochs,
        seed=0,
        checkpoint="none",
        log_every=args.log_every,
        name="sample",
        profile_steps=args.profile_steps,
    )
    configs, scalings = _configs(base, args.weak, args.repeats)
    # Denser sys/ samples than the default 1 s: these runs last seconds.
    os.environ.setdefault("LAB_SAMPLE_INTERVAL_S", "0.25")

    old = out.with_name(out.name + f".old-{int(time.time())}")
    if out.exists():
        out.rename(old)
    attempts: list[dict] = []
    ok = False
    try:
        for i in range(max(1, args.tries)):
            load_before = _wait_quiet(args.max_load, args.wait_quiet)
            out.mkdir(parents=True)
            started, t0 = now_iso(), time.monotonic()
            try:
                sweep_id, run_ids = _record(out, configs, scalings, args.timeout)
            except RuntimeError as exc:
                print(f"error: {exc}. Previous sample runs kept.", file=sys.stderr)
                failed = out.with_name(out.name + ".failed")
                shutil.rmtree(failed, ignore_errors=True)
                out.rename(failed)
                print(f"the failed recording is in {failed}", file=sys.stderr)
                return 1
            # Every attempt records at the same path (so run.json's argv is right), then is parked.
            parked = out.with_name(f"{out.name}.try{i}")
            out.rename(parked)
            attempts.append(
                dict(
                    path=parked,
                    sweep_id=sweep_id,
                    run_ids=run_ids,
                    started=started,
                    took=time.monotonic() - t0,
                    loads=(load_before, os.getloadavg()[0]),
                    noise=_noise(parked, run_ids),
                )
            )
            print(f"attempt {i + 1}: noise {attempts[-1]['noise']:.3f} (0 = steady)", flush=True)
            if attempts[-1]["noise"] <= math.log(1.15):
                break
        best = min(attempts, key=lambda a: a["noise"])
        best["path"].rename(out)
        torch_version = version("torch")
        for rid in best["run_ids"]:
            print(f"  {rid}: recorded on {_label(out / rid, torch_version)}")
        rel_argv = ["scripts/record_sample_runs.py", *(argv if argv is not None else sys.argv[1:])]
        readme = _readme(
            out,
            best["run_ids"],
            best["sweep_id"],
            rel_argv,
            best["started"],
            best["took"],
            best["loads"],
            base,
        )
        (out / "README.md").write_text(readme)
        print(next((line for line in readme.splitlines() if line.startswith("Noise check")), ""))
        size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
        print(f"{out}: {size / 1e6:.2f} MB")
        if size > MAX_BYTES:
            print(
                f"warning: the sample runs take {size / 1e6:.1f} MB (aim: under "
                f"{MAX_BYTES / 1e6:.0f} MB)",
                file=sys.stderr,
            )
        ok = True
        return 0
    finally:
        for a in attempts:
            shutil.rmtree(a["path"], ignore_errors=True)
        if ok:
            shutil.rmtree(old, ignore_errors=True)
        else:
            if out.exists():  # interrupted mid-sweep: keep what there is aside, not as the samples
                failed = out.with_name(out.name + ".failed")
                shutil.rmtree(failed, ignore_errors=True)
                out.rename(failed)
            if old.exists():
                old.rename(out)


if __name__ == "__main__":
    raise SystemExit(main())
