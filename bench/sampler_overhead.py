"""What the supervisor's 1 s device sampling costs the trainer.

Runs the same short training (single mode, CPU) alternately plain (the
trainer started directly, no supervisor) and under the supervisor (launched
with ``lab.engine.launch.launcher.launch``, sampling every second), N times each, in one
process, and prints the trainer's steady throughput (summary.json) for both
and their ratio. It also reads the supervisor's own CPU time while the run
goes on, the direct cost of sampling. Usage:

    python bench/sampler_overhead.py [--repeats 4] [--max-steps 1000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402

from lab.engine.launch import commands, launcher  # noqa: E402
from lab.engine.spec.run import RunConfig  # noqa: E402
from lab.runfolder import read_json  # noqa: E402


def plain(cfg: RunConfig, run_dir: Path) -> float:
    run_dir.mkdir(parents=True)
    argv, env = commands.build_command(cfg, run_dir, 0)
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return float(read_json(run_dir / "summary.json")["steady_throughput_samples_per_sec"])


def supervised(cfg: RunConfig, root: Path) -> tuple[float, float]:
    """(steady throughput, supervisor CPU seconds per wall second while the trainer ran)."""
    run_id = launcher.launch(cfg, root)
    d = root / run_id
    st = read_json(d / "status.json") or {}
    sup = psutil.Process(st["supervisor_pid"])
    first = None
    last = None
    while (read_json(d / "status.json") or {}).get("state") in ("queued", "starting", "running"):
        try:
            t = sup.cpu_times()
            sample = (time.monotonic(), t.user + t.system)
        except psutil.Error:
            break
        if (d / "progress.json").exists():  # count only while the trainer trains, not its start-up
            first = first or sample
            last = sample
        time.sleep(0.25)
    state = launcher.wait(run_id, root, 600)
    if state != "succeeded":
        raise SystemExit(f"supervised run {run_id} ended {state}: see {d}")
    cpu_rate = (
        (last[1] - first[1]) / (last[0] - first[0])
        if first and last and last[0] > first[0]
        else float("nan")
    )
    return float(read_json(d / "summary.json")["steady_throughput_samples_per_sec"]), cpu_rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--repeats", type=int, default=4, help="rounds; even, so each side goes first equally often"
    )
    ap.add_argument("--max-steps", type=int, default=1000)
    args = ap.parse_args()
    cfg = RunConfig(
        mode="single",
        model="tinycnn",
        dataset="digits",
        batch_size=64,
        epochs=100,
        max_steps=args.max_steps,
        image_size=16,
        log_every=10,
        checkpoint="none",
        extra_env={"OMP_NUM_THREADS": "1"},
    )
    with tempfile.TemporaryDirectory(prefix="sampler-bench-") as tmp:
        root = Path(tmp)
        plain(cfg, root / "warm-up")  # the first run of a series pays for cold caches: not counted
        a, b, cpu = [], [], []
        for i in range(args.repeats):
            # alternate which goes first, so a drift in the machine's load hits both sides alike
            if i % 2:
                thr, rate = supervised(cfg, root)
                a.append(plain(cfg, root / f"plain-{i}"))
            else:
                a.append(plain(cfg, root / f"plain-{i}"))
                thr, rate = supervised(cfg, root)
            b.append(thr)
            cpu.append(rate)
            print(
                f"round {i + 1}: plain {a[-1]:8.1f} samples/s   supervised {b[-1]:8.1f} samples/s "
                "  "
                f"supervisor CPU {rate * 1000:.1f} ms/s",
                flush=True,
            )
    ma, mb = statistics.median(a), statistics.median(b)
    # pairs ran back to back, so a pair's ratio is less exposed to the machine's changing load
    paired = statistics.median(y / x for x, y in zip(a, b))
    print(f"median plain      {ma:8.1f} samples/s")
    print(f"median supervised {mb:8.1f} samples/s  (sampling every 1 s)")
    print(
        f"ratio supervised/plain (medians) = {mb / ma:.4f}; median of paired ratios = "
        f"{paired:.4f}  "
        f"-> overhead {100 * (1 - paired):+.2f}%  (target < 1%)"
    )
    spread = (max(a) - min(a)) / ma
    print(
        f"run-to-run spread of the plain runs alone: {100 * spread:.1f}% (the noise floor of this "
        "comparison)"
    )
    print(
        f"supervisor CPU while training: median {statistics.median(cpu) * 1000:.1f} ms per second "
        f"= {statistics.median(cpu) * 100:.2f}% of one core (of {os.cpu_count()} cores)"
    )


if __name__ == "__main__":
    main()
