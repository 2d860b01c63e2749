"""The GPU check: one prepared command for a machine with NVIDIA GPUs (``bash
scripts/gpu_check.sh``).

In this order, within about 8 minutes on one or a few GPUs:

1. refuse at once, with one line and exit 1, where there is no usable GPU
   (no NVML driver, or a torch that cannot see CUDA): this check never skips;
2. run the ``gpu``-marked tests (``pytest -m gpu``), among them issue 33's
   (tests/test_knobs_gpu.py: DP's replicas in bf16, bf16 from compute
   capability 8.0, summary.json's memory estimate equal to the pre-flight's;
   tests/test_issue33b_gpu.py: PCIe from NVML's byte counters or the labelled
   snapshot, the NCCL version and TF32 recorded, the link check timed as
   nccl-tests with NCCL's transports parsed from the debug preset's log file in
   the run folder, DataParallel's broadcast/reduce bytes from its ops' shapes
   and each call's minimum over ranks; SM activity from NVML's GPM on Hopper
   and newer, and NVML's compute capability equal to torch's);
3. record, one after another with the lab's own launcher, resnet18 on
   synthetic data with ``--amp`` (fp16 + GradScaler): single (the first
   GPU), DataParallel over every GPU NVML can read and DDP with one process
   per GPU, into ``sample_data/runs-gpu/<label>/`` where the label names the
   GPU, the count, the driver and torch versions (also written to each run's
   ``recorded_on`` and to a README there); each run must succeed, name its
   GPUs by UUID in CUDA_VISIBLE_DEVICES, report one device per GPU it used
   (DP and DDP: all of them) and count the steps the scaler skipped;
4. stop a running DDP run from outside and check it ends ``stopped`` with
   ``summary.json`` written, every rank leaving after the same step, and
   none of its processes (supervisor, torchrun, ranks) left;
5. print one line per run: samples/s, peak memory per GPU, effective mode,
   AMP's skipped steps.

With ``--matrix`` it runs instead the option matrix's GPU tier (``python scripts/option_matrix.py
--tier gpu``: every pair of mode, model family, precision with fp16, channels-last, accumulation,
compile, FSDP's resharding and CPU offload, DDP's static graph and sync BatchNorm, an uneven
validation and another mode's checkpoint, on two GPUs with NCCL) and writes its table to
``sample_data/runs-gpu/<label>/option-matrix.md`` (docs/option-matrix.md).

Exit 0 only when every step passed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lab.engine import logs, procs  # noqa: E402
from lab.engine.devices import nvml as devices  # noqa: E402
from lab.engine.launch import launcher, sweeps  # noqa: E402
from lab.engine.spec.run import RunConfig  # noqa: E402
from lab.runfolder import read_json, write_json_atomic  # noqa: E402

OUT_ROOT = REPO / "sample_data" / "runs-gpu"


def gpu_or_exit() -> tuple[tuple[int, ...], str, str]:
    """(the GPU indices NVML can read, name, driver), or one line on stderr and exit 1."""
    import torch

    gpus = devices.read_gpus(with_processes=False)
    if not gpus:
        snap = devices.snapshot()
        sys.exit(
            print(
                f"gpu_check: no NVIDIA GPU found ({snap.reason or 'NVML reports 0 devices'}): "
                "run this on a machine with NVIDIA GPUs",
                file=sys.stderr,
            )
            or 1
        )
    if not torch.cuda.is_available():
        sys.exit(
            print(
                f"gpu_check: NVML sees {len(gpus)} GPU(s) but torch {torch.__version__} cannot "
                "use CUDA: "
                "install the CUDA build of torch",
                file=sys.stderr,
            )
            or 1
        )
    return tuple(g.index for g in gpus), gpus[0].name, devices.driver_version() or "unknown"


def label_for(n: int, name: str, driver: str, torch_version: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name.replace("NVIDIA ", "")).strip("-").lower()
    return f"{n}x-{slug}-driver{driver}-torch{torch_version.split('+')[0]}"


def run_gpu_tests() -> bool:
    print("== gpu tests: pytest -m gpu", flush=True)
    return (
        subprocess.call(
            [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-rs", "tests"], cwd=REPO
        )
        == 0
    )


def configs(gpus: tuple[int, ...], steps: int) -> list[RunConfig]:
    n = len(gpus)
    base = dict(
        model="resnet18",
        dataset="synthetic",
        batch_size=64 * n,
        amp=True,
        max_steps=steps,
        epochs=100,
        log_every=10,
        image_size=64,
        checkpoint="none",
        workers=2,
    )
    return [
        RunConfig(mode="single", gpus=gpus[:1], name="gpu-single", **base),
        RunConfig(mode="dp", gpus=gpus, name="gpu-dp", **base),
        RunConfig(mode="ddp", gpus=gpus, nproc=n, name="gpu-ddp", **base),
    ]


def run_problems(run_dir: Path) -> list[str]:
    """What is wrong with a recorded GPU run: its state, the UUIDs it was given, its devices, AMP's
    figures."""
    run, st, s = (read_json(run_dir / f) or {} for f in ("run.json", "status.json", "summary.json"))
    gpus = (run.get("config") or {}).get("gpus") or []
    visible = (run.get("env") or {}).get("CUDA_VISIBLE_DEVICES", "").split(",")
    want = 1 if s.get("effective_mode") == "single" else len(gpus)
    found = [] if st.get("state") == "succeeded" else [f"state {st.get('state')}"]
    if not all(v.startswith(("GPU-", "MIG-")) for v in visible):
        found.append(f"CUDA_VISIBLE_DEVICES={','.join(visible)} is not by UUID")
    if len(s.get("devices") or []) != want:
        found.append(f"devices {s.get('devices')} (want {want})")
    if s.get("amp_dtype") != "float16" or s.get("amp_skipped_steps") is None:
        found.append(
            f"amp_dtype {s.get('amp_dtype')}, amp_skipped_steps {s.get('amp_skipped_steps')}"
        )
    return found


def record(out: Path, label: str, gpus: tuple[int, ...], steps: int) -> list[str]:
    n = len(gpus)
    print(f"== recording into {out}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    sweep_id, run_ids = sweeps.launch_sweep(configs(gpus, steps), runs_dir=out)
    for rid in run_ids:
        state = launcher.wait(rid, out, timeout_s=240)
        meta = read_json(out / rid / "run.json") or {}
        meta["recorded_on"] = label
        write_json_atomic(out / rid / "run.json", meta)
        print(f"   {rid}: {state}", flush=True)
    (out / "README.md").write_text(
        f"# GPU runs: {label}\n\nRecorded by `bash scripts/gpu_check.sh` (sweep `{sweep_id}`): "
        "resnet18 on "
        f"synthetic data, `--amp`, {steps} steps each, global batch {64 * n}; single on GPU "
        f"{gpus[0]}, DataParallel over "
        f"{n} GPU(s), DDP with {n} process(es). Nothing here was written by hand.\n"
    )
    return run_ids


def summary_line(run_dir: Path) -> str:
    s = read_json(run_dir / "summary.json") or {}
    st = read_json(run_dir / "status.json") or {}
    peaks = s.get("peak_mem_mib") or {}
    mem = ", ".join(f"{d} {v:.0f} MiB" for d, v in sorted(peaks.items())) or "n/a"
    tput = s.get("steady_throughput_samples_per_sec") or s.get("throughput_samples_per_sec")
    return (
        f"{run_dir.name}: state {st.get('state')}, effective mode {s.get('effective_mode', '?')}, "
        f"{tput:.1f} samples/s, peak memory {mem}, AMP skipped {s.get('amp_skipped_steps')} step(s)"
        if tput
        else f"{run_dir.name}: state {st.get('state')}, no summary"
    )


def stop_check(tmp: Path, gpus: tuple[int, ...]) -> bool:
    """A long DDP run stopped from outside ends ``stopped`` with its summary, its ranks leave after
    the same step, and nothing of it is left."""
    print("== stop of a running DDP run", flush=True)
    n = len(gpus)
    cfg = RunConfig(
        mode="ddp",
        gpus=gpus,
        nproc=n,
        model="resnet18",
        dataset="synthetic",
        amp=True,
        batch_size=64 * n,
        epochs=100,
        image_size=64,
        checkpoint="none",
        name="gpu-stop",
    )
    rid = launcher.launch(cfg, tmp)
    procs.wait_until(
        lambda: ((read_json(tmp / rid / "progress.json") or {}).get("step") or 0) >= 20, 180
    )
    st = read_json(tmp / rid / "status.json") or {}
    state = launcher.stop(rid, tmp, grace_s=20)
    st = read_json(tmp / rid / "status.json") or st
    recorded = [
        [st.get("supervisor_pid"), st.get("supervisor_ct")],
        [st.get("pid"), st.get("pid_ct")],
    ]
    procs.wait_until(
        lambda: not any(procs.alive(p, ct) for p, ct in recorded + (st.get("tree") or [])), 5
    )
    left = [p for p, ct in recorded + (st.get("tree") or []) if procs.alive(p, ct)]
    summary = read_json(tmp / rid / "summary.json") or {}
    steps = {
        r: re.findall(r"SIGTERM: stopped after step (\d+)", logs.tail(tmp / rid, 400, r))
        for r in range(n)
    }
    together = len({tuple(v) for v in steps.values()}) == 1 and all(steps.values())
    print(
        f"   {rid}: {state}, summary.json {'written' if summary else 'MISSING'} (completed "
        f"{summary.get('completed')}), ranks left after steps {steps}, {len(left)} process(es) "
        "left",
        flush=True,
    )
    return state == "stopped" and summary.get("completed") is False and together and not left


def matrix_check(gpus: list[int], name: str, driver: str) -> int:
    """The option matrix's GPU tier on two of the GPUs: every row trains or is refused as planned
    (``training.matrix``); the table is written beside the recorded runs."""
    import torch

    from scripts import option_matrix
    from training import matrix

    if len(gpus) < matrix.RANKS:
        print(f"gpu_check --matrix: needs {matrix.RANKS} GPUs, {len(gpus)} here", flush=True)
        return 1
    out = OUT_ROOT / label_for(len(gpus), name, driver, torch.__version__)
    out.mkdir(parents=True, exist_ok=True)
    plan = matrix.plan(matrix.Tier("gpu"))
    print(f"== option matrix, GPU tier: {len(plan.trains)} rows to train, {len(plan.refused)} "
          "to refuse", flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        outcomes = option_matrix.run(plan, Path(tmp), timeout_s=3000)
    text = matrix.table(plan, outcomes)
    (out / "option-matrix.md").write_text(
        f"# The option matrix on {len(gpus)}x {name}, driver {driver}, torch {torch.__version__}"
        f"\n\n{text}"
    )
    print(text, flush=True)
    wrong = matrix.problems(plan, outcomes)
    for line in wrong:
        print(f"  FAILED: {line}")
    print("gpu_check --matrix: " + ("all passed" if not wrong else f"{len(wrong)} FAILED"))
    return 1 if wrong else 0


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=150, help="optimizer steps per recorded run")
    ap.add_argument("--skip-tests", action="store_true", help="record only")
    ap.add_argument(
        "--matrix",
        action="store_true",
        help="run only the option matrix's GPU tier (python scripts/option_matrix.py --tier gpu): "
        "fp16, CPU offload, sync BatchNorm, NCCL and torchvision's models; its table goes to "
        "sample_data/runs-gpu/<label>/option-matrix.md",
    )
    args = ap.parse_args(argv)
    gpus, name, driver = gpu_or_exit()
    if args.matrix:
        return matrix_check(gpus, name, driver)
    n = len(gpus)
    label = label_for(n, name, driver, torch.__version__)
    print(
        f"gpu_check: {n}x {name} (GPUs {', '.join(map(str, gpus))}), driver {driver}, torch "
        f"{torch.__version__}",
        flush=True,
    )
    ok = {"gpu tests": args.skip_tests or run_gpu_tests()}
    out = OUT_ROOT / label
    run_ids = record(
        out, f"{n}x {name}, driver {driver}, torch {torch.__version__} (nccl)", gpus, args.steps
    )
    with tempfile.TemporaryDirectory() as tmp:
        ok["stop"] = stop_check(Path(tmp), gpus)
    print("== summary", flush=True)
    for rid in run_ids:
        print("  " + summary_line(out / rid))
        found = run_problems(out / rid)
        ok[rid] = not found
        for problem in found:
            print(f"    FAILED: {problem}")
    failed = [k for k, v in ok.items() if not v]
    print("gpu_check: " + ("all passed" if not failed else "FAILED: " + ", ".join(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
