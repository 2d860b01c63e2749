"""Speedups you can trust, on real runs: the supervisor, the trainer, a CPU hog and ``python -m
lab``.

Every run here is a real supervised training run on the CPU (tinycnn, digits, a few dozen steps,
logging every step so that each run has twenty-odd throughput windows). The hog is a bounded busy
loop in child processes the test starts and ends. The machine these tests run on may be shared: a
run without the hog is not asserted quiet, only the hog run is asserted busy."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.engine import registry
from lab.engine.launch import launcher
from lab.engine.spec.run import RunConfig
from lab.engine.sweep.plan import interleaved

pytestmark = [pytest.mark.proc, pytest.mark.slow, pytest.mark.serial]  # a CPU hog; a quiet machine
REPO = Path(__file__).resolve().parent.parent
SMALL = RunConfig(
    mode="single",
    epochs=1,
    max_steps=30,
    log_every=1,
    image_size=16,
    batch_size=32,
    checkpoint="none",
    name="noise",
)
HOG = "import time\nend = time.time() + {s}\nwhile time.time() < end:\n    pass\n"


def _lab(*args: str, root: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lab", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "LAB_RUNS_DIR": str(root)},
    )


def _wait_all(run_ids: list[str], root: Path, timeout_s: float = 300) -> None:
    for rid in run_ids:
        state = launcher.wait(rid, root, timeout_s=timeout_s)
        assert state == "succeeded", (
            f"{rid}: {state}\n{(root / rid / 'stdout.log').read_text()[-2000:]}"
        )


def _compare(root: Path, *args: str) -> dict:
    res = _lab("compare", *args, "--json", root=root)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_a_run_beside_a_cpu_hog_is_busy_and_never_faster_beyond_noise(runs_dir):
    quiet = launcher.launch(SMALL, runs_dir)
    _wait_all([quiet], runs_dir)
    hogs = [
        subprocess.Popen([sys.executable, "-c", HOG.format(s=240)])
        for _ in range(max(1, (os.cpu_count() or 1) // 2))
    ]
    try:
        time.sleep(0.5)
        hogged = launcher.launch(SMALL, runs_dir)
        _wait_all([hogged], runs_dir)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    inter = registry.status(runs_dir / hogged)["interference"]
    assert inter["busy"] is True and inter["busy_fraction"] > 0.10 and inter["samples"] >= 2, inter
    assert "cores during" in inter["reasons"][0]
    status_json = json.loads(_lab("status", hogged, "--json", root=runs_dir).stdout)
    assert status_json["interference"] == inter
    doc = _compare(runs_dir, hogged, "--baseline", quiet)
    row = next(r for r in doc["runs"] if r["run_id"] == hogged)
    sp, base_tp = row["speedup"], next(r for r in doc["runs"] if r["run_id"] == quiet)["throughput"]
    assert any(w.startswith(f"{row['name']}") and "Busy machine" in w for w in doc["warnings"]), (
        doc["warnings"]
    )
    if sp["within_noise"]:
        seen = f"within noise: {sp['value']:.2f}x ({sp['ci_low']:.2f}-{sp['ci_high']:.2f})"
        assert row["verdict"] == "within noise"
    else:  # outside the noise only because the hog really slowed it
        seen = f"slowed by the hog: {sp['value']:.2f}x ({sp['ci_low']:.2f}-{sp['ci_high']:.2f})"
        assert sp["ci_high"] < 1.0 and row["throughput"]["median"] < base_tp["median"], (
            sp,
            row,
            base_tp,
        )
        assert row["verdict"] == "slower"
    print(
        f"hog run against the run without it: {seen}; the run without the hog was "
        f"{'busy' if registry.status(runs_dir / quiet)['interference']['busy'] else 'quiet'}"
    )
    text = _lab("compare", hogged, quiet, "--baseline", quiet, root=runs_dir).stdout
    assert "busy" in text and "warning:" in text


QUIET_PAIRS, QUIET_BUDGET_S = 3, 240


@pytest.mark.timeout(600)  # pairs of runs one after another, retried while the machine is shared
def test_identical_runs_on_a_quiet_machine_compare_within_noise(runs_dir, monkeypatch):
    # A claim about timing: these runs are not traced by coverage (scripts/test.sh measures
    # subprocesses through this variable), whose tracing would be part of what is timed.
    monkeypatch.delenv("COVERAGE_PROCESS_CONFIG", raising=False)
    # One thread per run: with two OpenMP threads on a small shared machine a run collapses whenever
    # another process takes a core (its threads wait for each other), which is that machine's noise.
    cfg = dataclasses.replace(SMALL, extra_env={"OMP_NUM_THREADS": "1"})
    seen: list[str] = []
    within: list[bool] = []
    shared: list[str] = []
    deadline = time.monotonic() + QUIET_BUDGET_S
    while len(seen) < QUIET_PAIRS and time.monotonic() < deadline:
        # two identical runs, back to back
        _, (a, b) = launcher.launch_sweep(interleaved([cfg], 2), runs_dir)
        _wait_all([a, b], runs_dir)
        busy = [registry.status(runs_dir / r)["interference"] for r in (a, b)]
        # The claim is about a quiet machine: no sample over the busy line, and others below a fifth
        # of a core on average (the "busy machine" warning itself allows more than that).
        if any(
            i["busy"] or i["busy_fraction"] > 0 or i["other_cpu_cores_mean"] >= 0.2 for i in busy
        ):
            shared.append("/".join(f"{i['other_cpu_cores_mean']:.1f}" for i in busy))
            continue
        doc = _compare(runs_dir, b, "--baseline", a)
        sp = next(r for r in doc["runs"] if r["run_id"] == b)["speedup"]
        seen.append(f"{sp['value']:.2f}x ({sp['ci_low']:.2f}-{sp['ci_high']:.2f})")
        within.append(sp["within_noise"])
        # A virtual machine's neighbours are invisible from inside it (no steal time is charged
        # here, yet identical runs once differed 1.45x on a quiet-looking machine): one pair in
        # three may be out; two out of three means the interval is too narrow.
        assert within.count(False) <= 1, f"identical runs on a quiet machine: {seen}"
    note = (
        f"quiet pairs: {seen or 'none'} (within noise: {within}); "
        f"pairs on a shared machine (others' cores): {shared or 'none'}"
    )
    print(note)
    if len(seen) < QUIET_PAIRS:
        pytest.skip(
            f"the machine was not quiet for {QUIET_PAIRS} pairs within {QUIET_BUDGET_S} s ({note})"
        )
    assert within.count(True) >= QUIET_PAIRS - 1, note


def test_sweep_with_repeats_interleaves_the_modes_and_compare_gives_medians(runs_dir):
    res = _lab(
        "sweep",
        "--modes",
        "single,ddp",
        "--repeats",
        "2",
        "--epochs",
        "1",
        "--max-steps",
        "20",
        "--log-every",
        "1",
        "--image-size",
        "16",
        "--batch-size",
        "32",
        "--checkpoint",
        "none",
        "--json",
        root=runs_dir,
    )
    assert res.returncode == 0, res.stderr
    sweep = json.loads(res.stdout)
    run_ids = sweep["run_ids"]
    assert len(run_ids) == 4
    _wait_all(run_ids, runs_dir)
    modes = [json.loads((runs_dir / r / "run.json").read_text())["config"]["mode"] for r in run_ids]
    assert modes == ["single", "ddp", "single", "ddp"]
    # they ran in that order, one after another
    st = [registry.status(runs_dir / r) for r in run_ids]
    for before, after in zip(st, st[1:]):
        assert before["ended_at"] <= after["started_at"], (before, after)
    doc = _compare(runs_dir, sweep["sweep_id"])
    assert [r["run_id"] for r in doc["runs"]] == run_ids
    groups = {g["mode"]: g for g in doc["by_mode"]}
    assert set(groups) == {"single", "ddp"}
    for mode, g in groups.items():
        medians = sorted(r["throughput"]["median"] for r in doc["runs"] if r["mode"] == mode)
        assert g["repeats"] == 2 and g["min"] == medians[0] and g["max"] == medians[1]
        assert g["median"] == pytest.approx(sum(medians) / 2)
    assert groups["single"]["speedup"] == 1.0  # the baseline is a single run
    text = _lab("compare", sweep["sweep_id"], root=runs_dir).stdout
    assert "repeats: " in text and " ddp: median " in text
