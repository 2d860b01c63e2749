"""Issue 11 end to end, on real runs: ``python -m lab sweep --scaling weak --modes single,ddp
--profile-steps`` as a user types it (a real supervisor, the real trainer, DDP as two gloo processes
under torchrun), then the Compare page (AppTest) and the Live page on what those runs wrote.

Weak scaling keeps the batch per device, so the DDP run's global batch is twice the single run's,
and the table's efficiency for it is its throughput per device over the single run's. Both runs are
profiled, so Compare draws the anatomy bars of their steps, reads them with their own numbers in
"How to read this", and offers every rank's trace for download, as the Live page does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from streamlit.testing.v1 import AppTest

from lab.engine.launch import launcher
from lab.runfolder import REPO_ROOT
from lab.views.compare import anatomy
from lab.views.compare import runs as compare_runs
from lab.views.compare.comparison import compare
from lab.views.compare.table import frame
from tests.helpers.compare_runs import load_runs

pytestmark = [pytest.mark.proc, pytest.mark.slow]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("runs")
    env = dict(os.environ, LAB_RUNS_DIR=str(root), OMP_NUM_THREADS="1")
    cmd = [
        sys.executable,
        "-m",
        "lab",
        "sweep",
        "--scaling",
        "weak",
        "--modes",
        "single,ddp",
        "--profile-steps",
        "3:5",
        "--max-steps",
        "6",
        "--image-size",
        "8",
        "--batch-size",
        "16",
        "--log-every",
        "1",
        "--checkpoint",
        "none",
        "--json",
    ]
    r = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    try:
        states = [launcher.wait(rid, root, timeout_s=240) for rid in out["run_ids"]]
    finally:
        for rid in out["run_ids"]:  # whatever happened, nothing of ours stays running
            launcher.stop(rid, root)
    assert states == ["succeeded", "succeeded"], [
        (root / rid / "stdout.log").read_text()[-2000:] for rid in out["run_ids"]
    ]
    single, ddp = (root / rid for rid in out["run_ids"])
    return {"root": root, "single": single, "ddp": ddp}


def _json(path) -> dict:
    return json.loads(path.read_text())


def test_weak_scaling_doubles_the_global_batch_and_efficiency_is_per_device(sweep):
    single, ddp = _json(sweep["single"] / "summary.json"), _json(sweep["ddp"] / "summary.json")
    assert (single["global_batch"], ddp["global_batch"]) == (16, 32)
    assert single["per_device_batch"] == ddp["per_device_batch"] == 16 and ddp["world_size"] == 2
    assert [_json(sweep[k] / "run.json")["scaling"] for k in ("single", "ddp")] == ["weak", "weak"]
    runs = load_runs(sweep["root"])
    table = frame(compare(runs)).set_index("run")
    names = compare_runs.labels(runs)
    by_dir = {r.run_dir: names[r.key] for r in runs}
    row, base = table.loc[by_dir[sweep["ddp"]]], table.loc[by_dir[sweep["single"]]]
    # the table's throughput is the steady windows' median (summary.json's throughput.median)
    tp = {k: s["throughput"]["median"] for k, s in (("single", single), ("ddp", ddp))}
    assert (row["throughput (samples/s)"], base["throughput (samples/s)"]) == pytest.approx(
        (tp["ddp"], tp["single"])
    )
    assert row["efficiency"] == pytest.approx((tp["ddp"] / 2) / (tp["single"] / 1))
    assert (row["scaling"], base["scaling"], base["efficiency"]) == ("weak", "weak", 1.0)
    # the profiled window is in the table too: DDP waited for some of its all-reduce, single for
    # none
    assert row["comm exposed % of step"] > 0 and base["comm exposed % of step"] == 0


def test_bars_carry_the_breakdowns_the_trainer_wrote(sweep):
    data = _json(sweep["ddp"] / "profile" / "breakdown.json")
    step, comm, *rest = anatomy.run_bars("ddp", anatomy.breakdown(sweep["ddp"]))
    for phase in ("data", "backward", "optimizer", "other"):
        assert step.ms[phase] == data["phases_ms"][phase]
    assert comm.ms["comm_exposed"] == pytest.approx(data["phases_ms"]["comm_exposed"])
    assert [r for r, _ in anatomy.trace_files(sweep["ddp"])] == [0, 1]


def test_compare_draws_the_anatomy_and_reads_it(sweep, monkeypatch):
    monkeypatch.setenv("LAB_RUNS_DIR", str(sweep["root"]))
    at = AppTest.from_file(str(REPO_ROOT / "pages" / "3_Compare.py"), default_timeout=60).run()
    assert not at.exception, at.exception
    assert "Anatomy of a step" in [s.value for s in at.subheader]
    # the anatomy bars, memory per device against throughput, then loss, throughput, speedup,
    # memory, system
    assert len(at.get("plotly_chart")) == 7
    runs = load_runs(sweep["root"])
    names = compare_runs.labels(runs)
    ddp = next(r for r in runs if r.run_dir == sweep["ddp"])
    expected = anatomy.sentence(names[ddp.key], anatomy.breakdown(ddp.run_dir))
    assert "waits" in expected and "ms per step on all-reduce" in expected
    # "How to read this", with this run's numbers
    assert any(expected in m.value for m in at.markdown)
    assert any("Strong or weak scaling" in m.value for m in at.markdown)
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels.count("rank 0 trace") == 2 and labels.count("rank 1 trace") == 1
    assert list(at.dataframe[0].value["scaling"]) == ["weak", "weak"]


def test_live_offers_each_ranks_trace(sweep, monkeypatch):
    monkeypatch.setenv("LAB_RUNS_DIR", str(sweep["root"]))
    at = AppTest.from_file(str(REPO_ROOT / "pages" / "2_Live.py"), default_timeout=60)
    at.session_state["live_run"] = sweep["ddp"].name
    at.run()
    assert not at.exception, at.exception
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels == ["rank 0 trace", "rank 1 trace"]
    assert any("Profiler traces" in m.value for m in at.markdown)
