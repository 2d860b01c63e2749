"""Would a lower priority keep a busy dashboard off a training run's critical path? Side by side.

A real training run of the lab (``lab.engine.launch.launcher``: supervisor, trainer, DDP with 2
gloo processes on the CPU, so both cores are the run's) trains while a stand-in for a dashboard
under heavy use (two busy processes in a session of their own, as a server started with
``setsid`` would be) competes for the cores. Conditions, interleaved round by round: the run
alone; beside the stand-in at nice 0; beside the stand-in after it lowered its own session's
weight (Linux autogroups: ``/proc/self/autogroup``, nice 10 and 19; a new session, such as every
run the lab starts, gets a new autogroup at nice 0, so the run keeps its weight, and the
stand-in's children inherit the lowered one). Prints each condition's median samples/s
(summary.json's steady ``throughput``) with its range, and the ratio to the run alone.

The stand-in is busier than a real dashboard (it wants both cores the whole run; a page's work
comes in bursts): the ratios bound what the dashboard's reading and drawing can take from a run.

    python bench/dashboard_priority.py [--rounds 3] [--steps 2000]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lab.engine.launch import launcher  # noqa: E402
from lab.engine.spec.run import RunConfig  # noqa: E402

HOG = """
import subprocess, sys
nice = sys.argv[1]
if nice != "0":  # this session's autogroup: the weight of the whole session against the others
    open("/proc/self/autogroup", "w").write(nice)
loop = "end = __import__('time').time() + 600\\nwhile __import__('time').time() < end: pass"
kids = [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(2)]
for k in kids:
    k.wait()
"""


def start_hog(nice: int) -> subprocess.Popen:
    """Two busy processes in a new session; ``nice`` > 0: that session's weight lowered first."""
    return subprocess.Popen(
        [sys.executable, "-c", HOG, str(nice)],
        cwd=REPO,
        start_new_session=True,
    )


def stop_hog(hog: subprocess.Popen) -> None:
    os.killpg(hog.pid, 9)
    hog.wait()


def one_run(cfg: RunConfig, root: Path) -> float:
    rid = launcher.launch(cfg, root)
    state = launcher.wait(rid, root, timeout_s=900)
    if state != "succeeded":
        raise SystemExit(
            f"run {rid} ended {state}: {(root / rid / 'stdout.log').read_text()[-2000:]}"
        )
    return float(json.loads((root / rid / "summary.json").read_text())["throughput"]["median"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2000)
    args = ap.parse_args()
    cfg = dataclasses.replace(
        RunConfig(), mode="ddp", nproc=2, epochs=100, max_steps=args.steps, log_every=5,
        image_size=16, batch_size=64, checkpoint="none", name="priority",
    )  # fmt: skip
    root = Path(tempfile.mkdtemp(prefix="lab-bench-priority-"))
    seen: dict[str, list[float]] = {
        "alone": [],
        "beside nice 0": [],
        "beside nice 10": [],
        "beside nice 19": [],
    }
    for _ in range(args.rounds):
        for label in seen:
            hog = None if label == "alone" else start_hog(int(label.split()[-1]))
            try:
                seen[label].append(one_run(cfg, root))
            finally:
                if hog is not None:
                    stop_hog(hog)
    base = statistics.median(seen["alone"])
    print(
        f"DDP, 2 gloo processes on {os.cpu_count()} cores, {args.steps} steps, {args.rounds} rounds"
    )
    for label, xs in seen.items():
        med = statistics.median(xs)
        print(
            f"{label:15s} {med:8.0f} samples/s ({min(xs):.0f}–{max(xs):.0f})  "
            f"{med / base:.2f}× the run alone"
        )


if __name__ == "__main__":
    main()
