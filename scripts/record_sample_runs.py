"""Record the sample runs shipped in sample_data/runs with this project's own launcher.

Runs of tinycnn on the digits set — single, DataParallel and 2-rank DDP
with the same seed and global batch (strong scaling), each ``--repeats``
times and interleaved (single, dp, ddp, single, …:
``lab.engine.sweep.plan.interleaved``), and a 2-rank DDP run
with the same batch per device (weak scaling: twice the global batch), on the
CPU with gloo (``lab.engine.sweep.plan.compare_modes_configs`` on a machine seen as
GPU-less), each profiled over a few steps (``--profile-steps``) so that the
Compare page draws the anatomy of their steps — are started as one sweep with
``lab.engine.launch.sweeps.launch_sweep`` (one after another, never side by side, so the
throughputs are not disturbed by each other), waited for, labelled in run.json
``recorded_on`` (machine, cores, torch version), and described in
``sample_data/runs/README.md``. Nothing in those folders is written by hand:
every figure is what the trainer and supervisor recorded. The previous sample
runs are kept until the new ones have all succeeded.

With ``--devices 1,2`` it records the second sample sweep instead, a device-count
sweep (runs named ``scaling-*``): single, and DDP as 1 and 2 gloo processes on
the CPU, at the same global batch, ``--repeats`` times interleaved
(``lab.engine.sweep.plan.device_count_configs``: the plan of ``python -m lab sweep
--modes single,ddp --devices 1,2``), which the Compare page draws as its scaling
chart. With ``--fsdp`` it records the third, the memory-trade sweep (runs ``fsdp-*``): resnet18
at 32 px, single, and DDP and FSDP at 1 and 2 gloo processes, the resident set measured as the
live set (``MALLOC_MMAP_THRESHOLD_``), which Compare draws as memory per device against
throughput. Each sweep has its own section in the README (``scripts/sample_readme.py``);
recording one keeps the other sweeps' runs and sections.

    python scripts/record_sample_runs.py [--epochs 3] [--batch-size 64] [--repeats 3]
      [--profile-steps 20:25] [--no-weak] [--devices 1,2] [--fsdp] [--out sample_data/runs]

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

from lab.engine import procs, registry  # noqa: E402
from lab.engine.launch import launcher, sweeps  # noqa: E402
from lab.engine.queue.book import QUEUE_DIR  # noqa: E402
from lab.engine.spec.run import RunConfig  # noqa: E402
from lab.engine.sweep.plan import (  # noqa: E402
    STRONG,
    WEAK,
    compare_modes_configs,
    device_count_configs,
    interleaved,
)
from lab.events import LogdirReader  # noqa: E402
from lab.runfolder import (  # noqa: E402
    FINAL_STATES,
    SAMPLE_RUNS,
    STATUS_JSON,
    SWEEPS_DIR,
    now_iso,
    read_json,
    write_json_atomic,
)
from lab.views.compare import runs as compare_runs  # noqa: E402
from lab.views.compare.comparison import compare  # noqa: E402
from lab.views.compare.figures import run_figures  # noqa: E402
from scripts import sample_readme  # noqa: E402

MAX_BYTES = 6_000_000  # both sample sweeps together


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
        sweep_id, run_ids = sweeps.launch_sweep(configs, runs_dir=out, scaling=scalings)
        print(f"sweep {sweep_id}: {', '.join(run_ids)}", flush=True)
        states = {rid: launcher.wait(rid, out, timeout_s=timeout_s) for rid in run_ids}
        for rid, state in states.items():
            print(f"  {rid}: {state}", flush=True)
        bad = {r: s for r, s in states.items() if s != "succeeded"}
        if bad:
            raise RuntimeError(f"not all runs succeeded ({bad}); see {out}/<run>/stdout.log")
        _settle(out, run_ids)
        return sweep_id, run_ids
    except BaseException:
        for rid in run_ids:  # failed or interrupted: leave nothing running behind us
            if launcher.wait(rid, out, timeout_s=0) not in FINAL_STATES:
                launcher.stop(rid, out)
        raise


def _settle(out: Path, run_ids: list[str], timeout_s: float = 60.0) -> None:
    """Wait for the sweep's supervisor to exit: it leaves the queue (``<runs>/.queue``) after its
    last run ended, and would write into ``out`` after the folder is parked. The queue's book is
    this machine's live state, not part of a sample, so it is left out."""
    st = read_json(out / run_ids[-1] / STATUS_JSON) or {}
    pid, ct = st.get("supervisor_pid"), st.get("supervisor_ct")
    if not procs.wait_until(lambda: not procs.alive(pid, ct), timeout_s, 0.1):
        raise RuntimeError(f"the sweep's supervisor (pid {pid}) did not exit in {timeout_s:.0f} s")
    shutil.rmtree(out / QUEUE_DIR, ignore_errors=True)


def _noise(out: Path, run_ids: list[str]) -> float:
    """0 on a steady machine: |log| of the single / DP-as-single throughput ratio (the same work),
    else (a device-count sweep has no DP) of the fastest / slowest of the single repeats."""
    figs = [run_figures(r) for r in _runs(out, run_ids)]
    m = sample_readme.by_mode(((x.mode, x.effective_mode), x.throughput) for x in figs)
    a, b = m.get(("single", "single")), m.get(("dp", "single"))
    if a and b:
        return abs(math.log(b / a))
    singles = [x.throughput for x in figs if x.mode == "single" and x.throughput]
    return math.log(max(singles) / min(singles)) if len(singles) > 1 else 0.0


def _carry_over(old: Path, out: Path, stem: str) -> list[str]:
    """Move the other sample sweeps' runs (run.json names not ``stem-*``) and their sweep records
    from ``old`` into ``out``: recording one sample sweep keeps the other. Returns the moved
    runs."""
    if not old.is_dir():
        return []
    moved = []
    for d in sorted(old.iterdir()):
        meta = read_json(d / "run.json") if d.is_dir() else None
        if meta and not str(meta.get("name") or "").startswith(f"{stem}-"):
            d.rename(out / d.name)
            moved.append(d.name)
    for rec in sorted((old / SWEEPS_DIR).glob("*.json")):
        ids = set((read_json(rec) or {}).get("run_ids") or [])
        if ids and ids <= set(moved):
            (out / SWEEPS_DIR).mkdir(exist_ok=True)
            for f in (rec, rec.with_suffix(".log")):
                if f.exists():
                    f.rename(out / SWEEPS_DIR / f.name)
    return moved


def _parser() -> argparse.ArgumentParser:
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
        "shortest run's last step (the weak DDP run takes half the steps per epoch)",
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
    ap.add_argument(
        "--devices",
        default=None,
        metavar="N,M",
        help="record the device-count sweep instead (runs scaling-*): single, and DDP as N, M, ... "
        "gloo processes on the CPU, e.g. 1,2; the Compare-modes sweep (runs sample-*) is kept",
    )
    ap.add_argument(
        "--fsdp",
        action="store_true",
        help="record the memory-trade sweep instead (runs fsdp-*): resnet18 at 32 px, single, and "
        "DDP and FSDP at the --devices counts (default 1,2); the other sweeps are kept",
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
    return ap


def _plan(args: argparse.Namespace) -> tuple[RunConfig, list[RunConfig], list[str], list[int]]:
    """The base config, the sweep's configs and scalings, and its device counts (empty: the
    Compare-modes sweep)."""
    counts = [int(n) for n in args.devices.split(",") if n.strip()] if args.devices else []
    base = RunConfig(
        model="tinycnn",
        dataset="digits",
        batch_size=args.batch_size,
        epochs=args.epochs,
        seed=0,
        checkpoint="none",
        log_every=args.log_every,
        name=sample_readme.SCALING_STEM if counts else sample_readme.MODES_STEM,
        profile_steps=args.profile_steps,
    )
    modes = ["single", "ddp"]
    if args.fsdp:  # the memory-trade sweep (sample_readme.fsdp_section says why the environment)
        counts = counts or [1, 2]
        modes.append("fsdp")
        base = dataclasses.replace(
            base,
            model="resnet18",
            image_size=32,
            name=sample_readme.FSDP_STEM,
            profile_steps="",  # resnet18's traces would triple the folder
            extra_env={"MALLOC_MMAP_THRESHOLD_": "65536"},
        )
    if not counts:
        return (base, *_configs(base, args.weak, args.repeats), [])
    # CPU/gloo on purpose (no GPUs: 0), even where GPUs exist, at most one process per core
    plan = device_count_configs(base, 0, modes, counts, STRONG, os.cpu_count() or 1)
    configs = interleaved(plan, args.repeats)
    return base, configs, [STRONG] * len(configs), counts


def _attempt(out: Path, i: int, configs, scalings, args) -> dict:
    """One recording at ``out`` (so run.json's argv is right), then parked beside it."""
    load_before = _wait_quiet(args.max_load, args.wait_quiet)
    out.mkdir(parents=True)
    started, t0 = now_iso(), time.monotonic()
    sweep_id, run_ids = _record(out, configs, scalings, args.timeout)
    parked = out.with_name(f"{out.name}.try{i}")
    out.rename(parked)
    return dict(
        path=parked,
        run_ids=run_ids,
        noise=_noise(parked, run_ids),
        rec=sample_readme.Recording(
            sweep_id, [], started, time.monotonic() - t0, (load_before, os.getloadavg()[0])
        ),
    )


def _finish(out: Path, old: Path, best: dict, base: RunConfig, counts: list[int], argv) -> str:
    """Label the kept sweep's runs and write its README section beside the other's; last, carry
    the other sample sweep over (``main`` carries it back if anything fails)."""
    torch_version = version("torch")
    for rid in best["run_ids"]:
        print(f"  {rid}: recorded on {_label(out / rid, torch_version)}")
    rec = dataclasses.replace(best["rec"], argv=["scripts/record_sample_runs.py", *argv])
    runs = _runs(out, best["run_ids"], sample=True)
    c = compare(runs, scalars=compare_runs.read_scalars(runs, LogdirReader))
    if base.name == sample_readme.FSDP_STEM:
        section = sample_readme.fsdp_section(runs, c, rec, base, counts)
    elif counts:
        section = sample_readme.scaling_section(runs, c, rec, base, counts)
    else:
        section = sample_readme.modes_section(runs, c, rec, base)
    previous = (old / "README.md").read_text() if (old / "README.md").is_file() else ""
    (out / "README.md").write_text(sample_readme.merged(previous, base.name, section))
    kept = _carry_over(old, out, base.name)
    print(f"kept {len(kept)} runs of the other sample sweep", flush=True)
    return section


def main(argv: list[str] | None = None) -> int:
    argv = list(argv if argv is not None else sys.argv[1:])
    args = _parser().parse_args(argv)
    out = args.out.resolve()
    base, configs, scalings, counts = _plan(args)
    # Denser sys/ samples than the default 1 s: these runs last seconds.
    os.environ.setdefault("LAB_SAMPLE_INTERVAL_S", "0.25")

    old = out.with_name(out.name + f".old-{int(time.time())}")
    if out.exists():
        out.rename(old)
    attempts: list[dict] = []
    ok = False
    try:
        for i in range(max(1, args.tries)):
            try:
                attempts.append(_attempt(out, i, configs, scalings, args))
            except RuntimeError as exc:
                print(f"error: {exc}. Previous sample runs kept.", file=sys.stderr)
                failed = out.with_name(out.name + ".failed")
                shutil.rmtree(failed, ignore_errors=True)
                out.rename(failed)
                print(f"the failed recording is in {failed}", file=sys.stderr)
                return 1
            print(f"attempt {i + 1}: noise {attempts[-1]['noise']:.3f} (0 = steady)", flush=True)
            if attempts[-1]["noise"] <= sample_readme.STEADY:
                break
        best = min(attempts, key=lambda a: a["noise"])
        best["path"].rename(out)
        section = _finish(out, old, best, base, counts, argv)
        print(next((line for line in section.splitlines() if line.startswith("Noise check")), ""))
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
                if old.exists():  # the other sample sweep's runs, if already carried over, go back
                    _carry_over(out, old, base.name)
                failed = out.with_name(out.name + ".failed")
                shutil.rmtree(failed, ignore_errors=True)
                out.rename(failed)
            if old.exists():
                old.rename(out)


if __name__ == "__main__":
    raise SystemExit(main())
