"""lab.views.compare.utilisation: mean utilisation per GPU and overall while the trainer ran, the
CPU share of a CPU run, and the "only GPU 0 works" warning of DataParallel; and the columns and
warning they give the Compare table and page. Series have the shape of lab.events.Series; the run
folders are written by the test in the contract's shape, with the run.json ``env`` and
``config.gpus`` the launcher records."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lab.runfolder import parse_time
from lab.views.compare import table as compare_columns
from lab.views.compare import utilisation
from lab.views.compare.comparison import compare
from lab.views.compare.runs import labels
from lab.views.compare.table import frame
from tests.helpers.compare_runs import load_runs, make_run

START = "2026-11-29T07:00:00+00:00"


def gpu0_warnings(runs, scalars):
    """The "only GPU 0 works" sentences of ``runs``, from their samples as the Comparison reads
    them."""
    utils = {r.key: utilisation.utilisation(r, scalars.get(r.key)) for r in runs}
    return utilisation.gpu0_warnings(runs, labels(runs), utils)


T0 = parse_time(START).timestamp()


class S:
    def __init__(self, values, times):
        self.value = np.asarray(values, dtype=float)
        self.wall_time = np.asarray(times, dtype=float)
        self.step = np.arange(len(values))


def setup(run_dir, *, gpus=(), omp=None, nproc=None, ended_after_s=10.0):
    meta = json.loads((run_dir / "run.json").read_text())
    meta["config"].update(gpus=list(gpus), nproc=nproc or 1)
    meta["env"] = {"OMP_NUM_THREADS": str(omp)} if omp else {}
    (run_dir / "run.json").write_text(json.dumps(meta))
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["ended_at"] = f"2026-11-29T07:00:{int(ended_after_s):02d}+00:00"
    (run_dir / "summary.json").write_text(json.dumps(summary))


# samples at -2 s (start-up, idle), 1, 5, 9 s (training) and 12 s (teardown, idle)
TIMES = [T0 - 2, T0 + 1, T0 + 5, T0 + 9, T0 + 12]


@pytest.fixture
def dp_run(tmp_path):
    root = tmp_path / "r"
    setup(
        make_run(root, "dp", mode="dp", devices=("cuda0", "cuda1"), created_at=START), gpus=(2, 3)
    )
    scalars = {
        "sys/gpu2/util_pct": S([0, 90, 95, 100, 0], TIMES),
        "sys/gpu3/util_pct": S([0, 30, 35, 40, 0], TIMES),
        "sys/gpu2/mem_used_mib": S([1, 2, 3, 4, 5], TIMES),
        "sys/cpu_pct": S([50] * 5, TIMES),
    }
    return load_runs(root)[0], scalars


def test_gpu_means_count_only_the_training(dp_run):
    run, scalars = dp_run
    u = utilisation.utilisation(run, scalars)
    assert u.per_gpu == {"gpu2": pytest.approx(95.0), "gpu3": pytest.approx(35.0)} and not u.on_cpu
    assert u.overall == pytest.approx(65.0)
    # none inside the window: all of them
    outside = {"sys/gpu2/util_pct": S([10, 20], [T0 - 50, T0 - 40])}
    assert utilisation.utilisation(run, outside).per_gpu == {"gpu2": pytest.approx(15.0)}
    assert utilisation.utilisation(run, {}) == utilisation.Utilisation({}, None, False)


def test_cpu_share_over_the_cores_the_run_was_given(tmp_path):
    root = tmp_path / "r"
    setup(
        make_run(root, "ddp", mode="ddp", devices=("cpu0", "cpu1"), created_at=START),
        omp=1,
        nproc=2,
    )
    [run] = load_runs(root)
    assert run.cpu_cores == 2
    u = utilisation.utilisation(run, {"sys/cpu_pct": S([5, 150, 170, 190, 5], TIMES)})
    # % of its 2 cores
    assert (u.per_gpu, u.overall, u.on_cpu) == ({}, pytest.approx(170.0 / 2), True)


def test_only_gpu0_works_under_dp(dp_run, tmp_path):
    run, scalars = dp_run
    [msg] = gpu0_warnings([run], {run.key: scalars})
    assert msg.startswith(
        "Only gpu2 works in dp: under DataParallel its mean utilisation was 95% against 35%"
    )
    even = dict(scalars, **{"sys/gpu3/util_pct": S([0, 50, 50, 50, 0], TIMES)})  # 95 < 2 x 50
    assert gpu0_warnings([run], {run.key: even}) == []
    root = tmp_path / "ddp"  # DDP is never "only GPU 0": one process per GPU
    setup(
        make_run(root, "ddp", mode="ddp", devices=("cuda0", "cuda1"), created_at=START),
        gpus=(2, 3),
        nproc=2,
    )
    [ddp] = load_runs(root)
    assert gpu0_warnings([ddp], {ddp.key: scalars}) == []


def test_the_table_and_the_page_warnings(dp_run):
    run, scalars = dp_run
    row = frame(compare([run], scalars={run.key: scalars})).iloc[0]
    assert (row["util % gpu2"], row["util % gpu3"], row["mean util %"]) == pytest.approx(
        (95.0, 35.0, 65.0)
    )
    assert compare_columns.column_formats(["util % gpu2"])["util % gpu2"].format == "%.0f"
    keys = [w.key for w in list(compare([run], scalars={run.key: scalars}).warnings)]
    assert keys == ["only_gpu0"]
    assert list(compare([run]).warnings) == []  # without the samples nothing is claimed


def test_sm_activity_decides_where_the_gpus_have_it_and_memory_is_evidence(dp_run):
    """NCCL's spinning kernels make GPU 1 read as busy to utilisation; SM activity (GPM) says
    GPU 0 did the work. Where every GPU has SM activity it decides, in both directions; device 0
    holding less memory than the others vetoes the finding."""
    run, scalars = dp_run
    even_util = dict(scalars, **{"sys/gpu3/util_pct": S([0, 95, 95, 95, 0], TIMES)})
    assert gpu0_warnings([run], {run.key: even_util}) == []
    sm = {
        "sys/gpu2/sm_active_pct": S([0, 80, 80, 80, 0], TIMES),
        "sys/gpu3/sm_active_pct": S([0, 10, 10, 10, 0], TIMES),
    }
    [msg] = gpu0_warnings([run], {run.key: {**even_util, **sm}})
    assert "its mean SM activity was 80% against 10%" in msg and "MiB at its peak" in msg
    flat_sm = {**sm, "sys/gpu3/sm_active_pct": S([0, 70, 70, 70, 0], TIMES)}
    assert gpu0_warnings([run], {run.key: {**scalars, **flat_sm}}) == []  # utilisation alone not
    summary = json.loads((run.run_dir / "summary.json").read_text())
    summary["peak_mem_mib"] = {"cuda0": 300.0, "cuda1": 900.0}
    (run.run_dir / "summary.json").write_text(json.dumps(summary))
    [reloaded] = load_runs(run.run_dir.parent)
    assert gpu0_warnings([reloaded], {reloaded.key: {**even_util, **sm}}) == []
