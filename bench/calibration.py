"""Are Compare's verdicts right? A/A sweeps that must read "within noise", A/B sweeps that must not.

An A/A sweep is ``python -m lab sweep --modes single --vary seed=1,2 --repeats 3``: two groups of
identical runs that differ only in the seed, which does not change the speed; every headline card
of it that reads "faster" or "slower" is a false verdict. An A/B sweep is the same with
``--vary data-delay-ms=0,D``: the trainer waits D ms per batch (a slow input pipeline), a known
slowdown (D = 6 makes a ~22 ms tinycnn step on this 2-core machine about 25% slower); its card
must read "slower". The sweeps run one after another (each waits for the last to end, and a
sweep's runs take turns), tinycnn on digits, ``--steps`` each (default 120, 12 logging windows).
The verdicts are read from ``python -m lab compare SWEEP --json`` (its ``headline`` list), so the
bench measures exactly what a user reads.

Prints, per sweep, its cards' verdicts; then the A/A false-verdict rate (cards reading faster or
slower / all A/A cards) and how many A/B sweeps read slower, with the command line, the date and
the load average. ``--evaluate-only`` reads the sweeps already in ``--runs-dir`` again (e.g. after
the verdict rule changed) without running any.

``--power`` asks what the machine's noise allows, from the runs already in ``--runs-dir``: it pools
the steady throughputs of every run without a delay (A) and with one (B), then draws groups of
``n`` runs from the pools (4,000 draws per n, seeded) and prints how often Compare's verdict
function (``lab.views.compare.verdict.compare_groups``, the documented 10% margin unless
``--margin-pct``) calls B slower than A (power) and calls two groups drawn from A different (false
verdicts), for n = 3, 4, 5, 6 and 8 repeats. Resampling treats the recorded runs as the machine's
noise: it says how many repeats a known slowdown needs here, not how the next sweep will go.

    python bench/calibration.py [--aa 20] [--seeds 2] [--ab 10] [--delay-ms 6] [--steps 120]
        [--repeats 3] [--runs-dir DIR] [--evaluate-only | --power [--margin-pct 10]]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FALSE = ("faster", "slower")  # an A/A card reading one of these is a false verdict
FINAL = ("succeeded", "failed", "stopped", "lost")


def lab(args: list[str], runs_dir: Path, timeout: float = 600) -> str:
    """``python -m lab ARGS`` with the bench's runs folder; its stdout (a failure raises)."""
    env = dict(os.environ, LAB_RUNS_DIR=str(runs_dir))
    p = subprocess.run(
        [sys.executable, "-m", "lab", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if p.returncode != 0:
        raise RuntimeError(f"python -m lab {' '.join(args)}: {p.stderr.strip() or p.stdout}")
    return p.stdout


def sweep_args(vary: str, a: argparse.Namespace) -> list[str]:
    epochs = max(1, -(-a.steps // 22))  # digits: 22 steps of 64 per epoch
    return [
        "sweep",
        "--modes",
        "single",
        "--vary",
        vary,
        "--repeats",
        str(a.repeats),
        "--max-steps",
        str(a.steps),
        "--epochs",
        str(epochs),
        "--log-every",
        "10",
        "--checkpoint",
        "none",
        "--json",
    ]


def run_sweep(vary: str, a: argparse.Namespace) -> str:
    """Start one sweep and wait until every run of it has ended; its sweep id."""
    out = json.loads(lab(sweep_args(vary, a), a.runs_dir))
    for rid in out["run_ids"]:
        while True:
            status = json.loads((a.runs_dir / rid / "status.json").read_text() or "{}")
            if status.get("state") in FINAL:
                break
            time.sleep(1.0)
    return out["sweep_id"]


def headline(sweep_id: str, runs_dir: Path) -> list[dict]:
    return json.loads(lab(["compare", sweep_id, "--json"], runs_dir)).get("headline") or []


def card_text(card: dict) -> str:
    s = card.get("speedup") or {}
    value = f"{s['value']:.2f}× ({s['ci_low']:.2f}–{s['ci_high']:.2f})" if s else "–"
    label = card.get("label") or card.get("group") or f"{card.get('mode')} on {card.get('devices')}"
    return f"{label}: {value} {card.get('verdict')}"


def kind_of(sweep_id: str, runs_dir: Path) -> str:
    """ "A/B" when a run of the sweep has a data delay, else "A/A"."""
    record = json.loads((runs_dir / ".sweeps" / f"{sweep_id}.json").read_text())
    for rid in record.get("run_ids") or []:
        run = json.loads((runs_dir / rid / "run.json").read_text())
        if (run.get("config") or {}).get("data_delay_ms"):
            return "A/B"
    return "A/A"


def ended(sweep_id: str, a: argparse.Namespace) -> bool:
    """Did every run of the sweep succeed (a sweep still running, or stopped, is left out of
    --evaluate-only)?"""
    record = json.loads((a.runs_dir / ".sweeps" / f"{sweep_id}.json").read_text())
    for rid in record.get("run_ids") or []:
        status = json.loads((a.runs_dir / rid / "status.json").read_text() or "{}")
        if status.get("state") != "succeeded":
            return False
    return True


def existing_sweeps(runs_dir: Path) -> list[str]:
    folder = runs_dir / ".sweeps"
    return sorted(p.stem for p in folder.glob("sweep-*.json")) if folder.is_dir() else []


def interleave(aa: int, ab: int) -> list[str]:
    """A/A and A/B spread evenly through the plan, so a slow spell of the machine hits both."""
    slots = [((i + 0.5) / aa, "A/A") for i in range(aa)] + [
        ((i + 0.5) / ab, "A/B") for i in range(ab)
    ]
    return [kind for _, kind in sorted(slots)]


def conditions(sweep_id: str, runs_dir: Path) -> str:
    """How the sweep's runs were measured: how many the supervisor flagged busy, and the range of
    their steady throughputs (samples/s)."""
    record = json.loads((runs_dir / ".sweeps" / f"{sweep_id}.json").read_text())
    busy, values = 0, []
    for rid in record.get("run_ids") or []:
        status = json.loads((runs_dir / rid / "status.json").read_text() or "{}")
        busy += bool((status.get("interference") or {}).get("busy"))
        summary = runs_dir / rid / "summary.json"
        if summary.is_file():
            median = (json.loads(summary.read_text()).get("throughput") or {}).get("median")
            values += [median] if median else []
    spread = f"{min(values):.0f}–{max(values):.0f} samples/s" if values else "no throughput"
    return f"[{busy} of {len(record.get('run_ids') or [])} runs busy, {spread}]"


def report(sweeps: list[tuple[str, str]], runs_dir: Path) -> None:
    aa_cards = aa_false = ab_sweeps = ab_slower = 0
    for kind, sid in sweeps:
        cards = headline(sid, runs_dir)
        verdicts = [c.get("verdict") for c in cards]
        shown = "; ".join(card_text(c) for c in cards) or "no card"
        print(f"{kind} {sid}: {shown} {conditions(sid, runs_dir)}")
        if kind == "A/A":
            aa_cards += len(cards)
            aa_false += sum(v in FALSE for v in verdicts)
        else:
            ab_sweeps += 1
            ab_slower += bool(verdicts) and all(v == "slower" for v in verdicts)
    rate = f"{aa_false / aa_cards:.1%}" if aa_cards else "n/a"
    print(
        f"A/A: {aa_false} of {aa_cards} cards read faster or slower: false-verdict rate {rate} "
        "(target: at most 5% over at least 20 cards)"
    )
    print(f"A/B: {ab_slower} of {ab_sweeps} sweeps read slower (target: at least 9 of 10 sweeps)")


def pooled_throughputs(runs_dir: Path) -> tuple[list[float], list[float]]:
    """Every succeeded run's steady throughput in ``runs_dir``: (without a delay, with one)."""
    plain: list[float] = []
    delayed: list[float] = []
    for summary in sorted(runs_dir.glob("*/summary.json")):
        s = json.loads(summary.read_text())
        median = (s.get("throughput") or {}).get("median")
        if median and s.get("completed"):
            (delayed if (s.get("config") or {}).get("data_delay_ms") else plain).append(median)
    return plain, delayed


def power(runs_dir: Path, margin_pct: float, draws: int = 4000) -> int:
    """Resample the recorded runs: how often the verdict calls B slower, and A/A different."""
    sys.path.insert(0, str(REPO))
    from lab.views.compare.verdict import WITHIN, compare_groups  # the function Compare uses

    plain, delayed = pooled_throughputs(runs_dir)
    if len(plain) < 16 or len(delayed) < 8:
        print(
            f"error: --power needs >= 16 runs without and >= 8 with a delay in {runs_dir}; "
            f"found {len(plain)} and {len(delayed)}: run the bench first",
            file=sys.stderr,
        )
        return 2
    print(
        f"# pools: {len(plain)} runs without a delay ({min(plain):.0f}–{max(plain):.0f} "
        f"samples/s), {len(delayed)} with one ({min(delayed):.0f}–{max(delayed):.0f}); "
        f"margin {margin_pct:g}%, {draws} draws per row"
    )
    rng = random.Random(20261203)
    for n in (3, 4, 5, 6, 8):
        slower = false = 0
        for _ in range(draws):
            b = compare_groups(rng.sample(plain, n), rng.sample(delayed, n), margin_pct)
            a = compare_groups(rng.sample(plain, n), rng.sample(plain, n), margin_pct)
            slower += b.verdict == "slower"
            false += a.verdict != WITHIN
        print(
            f"repeats {n}: A/B called slower in {slower / draws:.1%}, "
            f"A/A called different in {false / draws:.1%}"
        )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--aa", type=int, default=20, help="A/A sweeps (seed=1,2)")
    ap.add_argument(
        "--seeds", type=int, default=2, help="seeds per A/A sweep: seed=1..N, N-1 cards each"
    )
    ap.add_argument("--ab", type=int, default=10, help="A/B sweeps (data-delay-ms=0,D)")
    ap.add_argument("--delay-ms", type=float, default=6.0, help="D: the A/B slowdown's delay")
    ap.add_argument("--steps", type=int, default=120, help="steps per run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--runs-dir", type=Path, default=None, help="default: a new temp folder")
    ap.add_argument(
        "--evaluate-only", action="store_true", help="read the sweeps in --runs-dir; run none"
    )
    ap.add_argument(
        "--power", action="store_true", help="resample the runs in --runs-dir (see above)"
    )
    ap.add_argument("--margin-pct", type=float, default=10.0, help="the verdict's margin")
    a = ap.parse_args()
    if a.repeats < 1 or a.steps < 20 or a.aa < 0 or a.ab < 0 or a.seeds < 2:
        print(
            "error: give --repeats >= 1, --steps >= 20, --aa and --ab >= 0, --seeds >= 2",
            file=sys.stderr,
        )
        return 2
    if (a.evaluate_only or a.power) and a.runs_dir is None:
        print(
            "error: --evaluate-only and --power read an existing --runs-dir: give it",
            file=sys.stderr,
        )
        return 2
    if a.power:
        return power(a.runs_dir.resolve(), a.margin_pct)
    a.runs_dir = (a.runs_dir or Path(tempfile.mkdtemp(prefix="calibration-"))).resolve()
    print(
        f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} on "
        f"{socket.gethostname()} ({os.cpu_count()} cores), load average at start "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    print("# command: python bench/calibration.py " + shlex.join(sys.argv[1:]))
    print(f"# runs folder: {a.runs_dir}", flush=True)
    if a.evaluate_only:
        sweeps = [(kind_of(s, a.runs_dir), s) for s in existing_sweeps(a.runs_dir) if ended(s, a)]
    else:
        plan = interleave(a.aa, a.ab)
        sweeps = []
        for kind in plan:
            seeds = ",".join(str(i) for i in range(1, a.seeds + 1))
            vary = f"seed={seeds}" if kind == "A/A" else f"data-delay-ms=0,{a.delay_ms:g}"
            sweeps.append((kind, run_sweep(vary, a)))
            print(f"# ran {kind} {sweeps[-1][1]} ({len(sweeps)}/{len(plan)})", flush=True)
    report(sweeps, a.runs_dir)
    print("# load average at end " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
