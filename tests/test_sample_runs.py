"""The shipped sample runs (sample_data/runs) and how they are recorded
(scripts/record_sample_runs.py with scripts/sample_readme.py).

The folder holds three real sweeps: the Compare-modes sweep (runs ``sample-*``), the device-count
sweep (``scaling-*``: single, DDP at 1 and 2 gloo processes, 3 repeats each) and the memory-trade
sweep (``fsdp-*``: resnet18, single, DDP and FSDP at 1 and 2, 2 repeats each). The scaling sweep
gives Compare its scaling curve, read here from the shipped files, in-process and through
``python -m lab compare --json``; its README section states the same figures; the memory-trade
sweep, the newest, is what a fresh clone's Compare opens on. Recording one sweep keeps the others'
runs, sweep records and README sections.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pytest

from lab.events import LogdirReader
from lab.runfolder import REPO_ROOT, SAMPLE_RUNS, SWEEPS_DIR, read_json
from lab.views.compare import document, memory
from lab.views.compare import runs as compare_runs
from lab.views.compare.comparison import compare
from scripts import record_sample_runs, sample_readme
from tests.helpers.compare_runs import available_runs, make_run, sample_sweep

MODES, SCALING, FSDP = (
    sample_readme.MODES_STEM,
    sample_readme.SCALING_STEM,
    sample_readme.FSDP_STEM,
)


def _scaling_sweep_id() -> str:
    ids = {(read_json(d / "run.json") or {}).get("sweep_id") for d in _dirs(SCALING)}
    assert len(ids) == 1, f"{SAMPLE_RUNS}: the scaling-* runs are not one sweep ({ids})"
    return ids.pop()


def _dirs(stem: str) -> list:
    return [
        d
        for d in sorted(SAMPLE_RUNS.iterdir())
        if str((read_json(d / "run.json") or {}).get("name") or "").startswith(f"{stem}-")
    ]


def _check_curve(curve) -> None:
    groups = {(p["mode"], p["devices"]): p for p in curve}
    assert set(groups) == {("single", 1), ("ddp", 1), ("ddp", 2)}
    assert all(len(p["runs"]) == 3 for p in curve)
    assert all(p["rate"] == "samples/s" and p["throughput"]["median"] > 0 for p in curve)
    assert groups["single", 1]["speedup"]["value"] == pytest.approx(1.0)
    two = groups["ddp", 2]
    assert two["efficiency"]["value"] == pytest.approx(two["speedup"]["value"] / 2)


def test_the_shipped_scaling_sweep_gives_a_scaling_curve(tmp_path):
    runs = available_runs(tmp_path, SAMPLE_RUNS)
    chosen = sample_sweep(runs, SCALING)
    assert len(chosen) == 9, f"{SAMPLE_RUNS}: re-record with record_sample_runs.py --devices 1,2"
    c = compare(chosen, scalars=compare_runs.read_scalars(chosen, LogdirReader))
    _check_curve(c.scaling_curve)
    # the Compare-modes sweep is still there, whole, and has no curve (one device count per mode)
    modes = sample_sweep(runs, MODES)
    assert len(modes) == 10 and {r.option("mode") for r in modes} == {"single", "dp", "ddp"}
    assert not compare(modes, scalars=compare_runs.read_scalars(modes, LogdirReader)).scaling_curve


@pytest.mark.proc
def test_lab_compare_json_of_the_shipped_sweep(tmp_path):
    # a copy: the CLI must not write next to the shipped runs
    root = tmp_path / "runs"
    shutil.copytree(SAMPLE_RUNS, root, ignore=shutil.ignore_patterns("logs", "*.log"))
    sweep = _scaling_sweep_id()
    env = dict(os.environ, LAB_RUNS_DIR=str(root), CUDA_VISIBLE_DEVICES="")
    r = subprocess.run(
        [sys.executable, "-m", "lab", "compare", sweep, "--json"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    _check_curve(json.loads(r.stdout)["scaling_curve"])


def test_the_readme_labels_both_sweeps_with_the_figures_compare_computes(tmp_path):
    text = (SAMPLE_RUNS / "README.md").read_text()
    found = sample_readme.sections(text)
    assert set(found) == {MODES, SCALING, FSDP}
    scaling = found[SCALING]
    assert _scaling_sweep_id() in scaling and "record_sample_runs.py --devices 1,2" in scaling
    for label in ("CPU (gloo)", "cores", "torch ", "started ", "load", "**CPU with gloo**"):
        assert label in scaling, label
    runs = sample_sweep(available_runs(tmp_path, SAMPLE_RUNS), SCALING)
    c = compare(runs, scalars=compare_runs.read_scalars(runs, LogdirReader))
    assert sample_readme.scaling_table(c.scaling_curve) in scaling
    assert "sweep-20261129-151558-b9c9" in found[MODES]  # the first sweep's section kept


def test_the_shipped_fsdp_sweep_has_an_fsdp_curve_and_the_memory_trade_its_readme_states(tmp_path):
    runs = available_runs(tmp_path, SAMPLE_RUNS)
    chosen = sample_sweep(runs, FSDP)
    assert len(chosen) == 10, f"{SAMPLE_RUNS}: re-record with record_sample_runs.py --fsdp"
    # a fresh clone's Compare opens on it: the newest sample sweep, whole
    assert sorted(compare_runs.default_selection(runs)) == sorted(r.key for r in chosen)
    c = compare(chosen, scalars=compare_runs.read_scalars(chosen, LogdirReader))
    groups = {(p["mode"], p["devices"]): p for p in c.scaling_curve}
    assert set(groups) == {("single", 1), ("ddp", 1), ("ddp", 2), ("fsdp", 1), ("fsdp", 2)}
    assert all(len(p["runs"]) == 2 for p in c.scaling_curve)
    points = {(p.mode, p.devices): p for p in memory.frontier(chosen)}
    assert all(p.measured for p in points.values())
    # resnet18 on 2 ranks: fsdp holds less per rank than ddp, and the estimate says why
    assert points["fsdp", 2].memory_mib < points["ddp", 2].memory_mib
    for r in chosen:
        est = r.summary["memory"]["estimate_mib"]["cpu0"]
        if r.option("mode") == "fsdp" and r.option("nproc") == 2:
            assert est["gathered"] > 0 and "buckets" not in est
    text = sample_readme.sections((SAMPLE_RUNS / "README.md").read_text())[FSDP]
    assert sample_readme.memory_trade(chosen) in text
    for label in ("CPU (gloo)", "cores", "torch ", "MALLOC_MMAP_THRESHOLD_=65536", "--fsdp"):
        assert label in text, label


def test_the_fsdp_recording_plans_resnet18_in_three_modes_with_the_live_set_measured():
    args = record_sample_runs._parser().parse_args(["--fsdp", "--repeats", "2"])
    base, configs, scalings, counts = record_sample_runs._plan(args)
    assert (base.model, base.image_size, base.name, counts) == ("resnet18", 32, FSDP, [1, 2])
    assert [c.name for c in configs[:5]] == [
        "fsdp-singlex1-r1", "fsdp-ddpx1-r1", "fsdp-ddpx2-r1", "fsdp-fsdpx1-r1", "fsdp-fsdpx2-r1",
    ]  # fmt: skip
    assert len(configs) == len(scalings) == 10
    assert all(c.extra_env == {"MALLOC_MMAP_THRESHOLD_": "65536"} for c in configs)


def test_a_section_is_replaced_and_the_other_kept():
    one = sample_readme.merged("", MODES, "## modes A")
    two = sample_readme.merged(one, SCALING, "## scaling B")
    three = sample_readme.merged(two, MODES, "## modes C")
    assert three.startswith(sample_readme.HEADER)
    assert "modes C" in three and "scaling B" in three and "modes A" not in three
    assert three.index("modes C") < three.index("scaling B")  # always in the same order


def test_recording_one_sweep_carries_the_other_over(tmp_path):
    old, out = tmp_path / "old", tmp_path / "new"
    make_run(old, "sample-single", sweep_id="sweep-a")
    make_run(old, "scaling-ddpx2-r1", sweep_id="sweep-b")
    (old / SWEEPS_DIR).mkdir()
    for sweep, ids in (("sweep-a", ["sample-single"]), ("sweep-b", ["scaling-ddpx2-r1"])):
        (old / SWEEPS_DIR / f"{sweep}.json").write_text(json.dumps({"run_ids": ids}))
        (old / SWEEPS_DIR / f"{sweep}.log").write_text("log")
    make_run(out, "scaling-ddpx2-r2", sweep_id="sweep-c")
    # the scaling sweep was re-recorded: the modes sweep comes over, the old scaling run does not
    assert record_sample_runs._carry_over(old, out, SCALING) == ["sample-single"]
    assert sorted(p.name for p in out.iterdir()) == [
        SWEEPS_DIR,
        "sample-single",
        "scaling-ddpx2-r2",
    ]
    assert sorted(p.name for p in (out / SWEEPS_DIR).iterdir()) == ["sweep-a.json", "sweep-a.log"]
    assert (old / "scaling-ddpx2-r1").is_dir()  # the replaced run stays behind, to be removed
    # a failure after that: carried back, as it was
    assert record_sample_runs._carry_over(out, old, SCALING) == ["sample-single"]
    assert (old / "sample-single" / "run.json").is_file() and not (out / "sample-single").exists()
    assert (old / SWEEPS_DIR / "sweep-a.json").is_file()


def test_compare_json_and_text_carry_the_memory_trade_of_the_fsdp_sweep(tmp_path):
    chosen = sample_sweep(available_runs(tmp_path, SAMPLE_RUNS), FSDP)
    c = compare(chosen, scalars=compare_runs.read_scalars(chosen, LogdirReader))
    doc = document.to_json(c)
    points = memory.frontier(chosen)
    assert doc["memory_frontier"] == [dataclasses.asdict(p) for p in points]
    assert [(p["mode"], p["devices"]) for p in doc["memory_frontier"]] == [
        ("single", 1), ("ddp", 1), ("ddp", 2), ("fsdp", 1), ("fsdp", 2),
    ]  # fmt: skip
    assert doc["memory_trade"] == memory.trade(points) and len(doc["memory_trade"]) == 2
    assert [f"memory: {s}" for s in doc["memory_trade"]] == [
        line for line in document.text(c) if line.startswith("memory: ")
    ]
