"""lab.views.live.progress (progress/ETA), lab.views.live.runs (the default run, the glance lists,
the failure box, the notes), lab.views.device_strip (the device rows), lab.views.live.run_charts
(chart data built from real event files written by torch's SummaryWriter and read back through
lab.events) and lab.views.text."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest

from lab.views import device_strip
from lab.views.live import progress, run_charts
from lab.views.live import runs as live
from lab.views.runscalars import run_scalars, split_sys


def rec(
    run_id="r",
    state="running",
    progress=None,
    summary=None,
    created_at="2026-11-29T07:00:00+00:00",
    **kw,
):
    base = dict(
        run_id=run_id,
        state=state,
        mode="ddp",
        name="",
        progress=progress,
        summary=summary,
        created_at=created_at,
        diagnosis=None,
        exit_code=None,
        run_dir=None,
    )
    base.update(kw)
    return SimpleNamespace(**base)


def test_progress_of_running_run_gives_fraction_eta_and_rate():
    now = 1_000_000.0
    p = progress.progress_of(
        rec(
            progress={
                "step": 30,
                "total_steps": 120,
                "elapsed_s": 15.0,
                "samples_per_sec": 812.5,
                "updated_at": now - 1,
            }
        ),
        now=now,
    )
    assert p.fraction == pytest.approx(0.25)
    # 0.5 s per step so far, 90 steps left, 1 s already passed since the write
    assert p.eta_s == pytest.approx(44.0)
    assert p.samples_per_sec == 812.5
    assert p.stale_s is None
    assert "step 30 / 120" in p.label and "ETA 0:44" in p.label and "812 samples/s" in p.label


def test_progress_of_stale_running_run_says_so():
    now = 1_000_000.0
    p = progress.progress_of(
        rec(progress={"step": 5, "total_steps": 100, "elapsed_s": 5.0, "updated_at": now - 125}),
        now=now,
    )
    assert p.stale_s == pytest.approx(125)
    assert "no progress for 2:05" in p.label
    assert p.eta_s == 0.0  # never negative


def test_progress_of_finished_run_uses_summary():
    p = progress.progress_of(
        rec(
            state="succeeded",
            progress={"step": 40, "total_steps": 44, "elapsed_s": 9.0},
            summary={
                "steps": 44,
                "wall_time_s": 10.5,
                "throughput_samples_per_sec": 600.0,
                "steady_throughput_samples_per_sec": 700.0,
            },
        )
    )
    assert p.fraction == 1.0 and p.step == 44 and p.eta_s is None
    assert p.samples_per_sec == 700.0 and p.elapsed_s == 10.5
    assert "took 0:10" in p.label


def test_progress_of_queued_run_without_progress():
    p = progress.progress_of(rec(state="queued"))
    assert p.fraction is None and p.step is None
    assert p.label == "waiting for its turn"


def test_default_run_prefers_newest_running_then_newest():
    a = rec("a", "succeeded", created_at="2026-11-29T07:00:00+00:00")
    b = rec("b", "running", created_at="2026-11-29T07:01:00+00:00")
    c = rec("c", "failed", created_at="2026-11-29T07:02:00+00:00")
    d = rec("d", "running", created_at="2026-11-29T06:00:00+00:00")
    assert live.default_run([a, b, c, d]) == "b"
    assert live.default_run([a, c]) == "c"
    assert live.default_run([]) is None


def test_run_label_names_id_name_mode_and_state():
    assert (
        live.run_label(rec("20261129-ddp-x", name="nice"))
        == "20261129-ddp-x “nice” · ddp · running"
    )
    # name in the id
    assert live.run_label(rec("20261129-ddp-x", name="x"), state=False) == "20261129-ddp-x · ddp"


def test_glance_splits_active_and_latest_finished():
    rs = [rec(f"f{i}", "succeeded", created_at=f"2026-11-29T07:0{i}:00+00:00") for i in range(8)]
    rs.append(rec("q", "queued", created_at="2026-11-29T06:00:00+00:00"))
    active, finished = live.glance(rs, finished=3)
    assert [r.run_id for r in active] == ["q"]
    assert [r.run_id for r in finished] == ["f7", "f6", "f5"]


def test_device_rows_cpu_view_from_the_real_snapshot():
    from lab.engine.devices.nvml import snapshot

    snap = snapshot()
    if snap.gpus:
        pytest.skip("this machine has GPUs; the CPU view is shown only without them")
    rows = device_strip.device_rows(snap)
    assert len(rows) == 1 and rows[0]["label"].startswith("CPU")
    assert 0.0 <= rows[0]["mem"] <= 1.0


def test_device_rows_one_per_gpu_with_fractions():
    # GPUs are faked here (no NVIDIA GPU on this machine): plain GpuRecords.
    from lab.engine.devices.nvml import CpuRecord, DeviceSnapshot, GpuProcess, GpuRecord

    g0 = GpuRecord(
        0, "H100", "u0", 50.0, 1024.0, 4096.0, 300.0, 61.0, (GpuProcess(1, 1000.0, "run-x"),)
    )
    g1 = GpuRecord(1, "H100", "u1", None, None, 4096.0, None, None)
    snap = DeviceSnapshot((g0, g1), CpuRecord(2, 1.0, (1.0, 1.0), 1.0, 2.0), None, time.time())
    rows = device_strip.device_rows(snap)
    assert [r["label"] for r in rows] == ["GPU 0 · H100", "GPU 1 · H100"]
    assert rows[0]["util"] == 0.5 and rows[0]["mem"] == 0.25 and "run-x" in rows[0]["extra"]
    assert rows[1]["util"] is None and rows[1]["util_text"] == "util n/a" and rows[1]["mem"] is None


def _write(dir_, points: dict[str, list[float]], wall0: float = 1_700_000_000.0, dt: float = 1.0):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(dir_))
    for tag, vals in points.items():
        for i, v in enumerate(vals):
            w.add_scalar(tag, v, global_step=i * 10, walltime=wall0 + i * dt)
    w.close()


def _read(run_dir):
    from lab.events import LogdirReader

    return run_scalars(LogdirReader(str(run_dir)))


def test_charts_from_real_cpu_run_folder(tmp_path):
    run = tmp_path / "run"
    _write(
        run / "tb",
        {
            "train/loss": [2.0, 1.5, 1.0],
            "val/loss": [1.8, 1.1],
            "train/acc": [0.1, 0.5, 0.8],
            "train/lr": [0.05, 0.05, 0.05],
        },
    )
    _write(
        run / "sys",
        {"sys/cpu_pct": [150.0, 190.0, 180.0, 170.0], "sys/rss_mib": [300.0, 310.0, 320.0, 330.0]},
        wall0=1_700_000_005.0,
        dt=0.5,
    )
    tb, sysd = split_sys(_read(run))
    assert set(tb) == {"train/loss", "val/loss", "train/acc", "train/lr"}
    assert set(sysd) == {"sys/cpu_pct", "sys/rss_mib"}

    specs = {s.title: s for s in run_charts.train_charts(tb)}
    assert set(specs) == {"Loss", "Accuracy"}  # no perf/ tags written, so no throughput chart
    names = [t[0] for t in specs["Loss"].traces]
    assert names == ["train/loss", "val/loss"]
    np.testing.assert_array_equal(specs["Loss"].traces[0][1], [0, 10, 20])
    np.testing.assert_allclose(specs["Loss"].traces[0][2], [2.0, 1.5, 1.0])

    sys_specs, note = run_charts.sys_charts(sysd)
    assert [s.title for s in sys_specs] == [
        "CPU use of the run's processes",
        "Memory (RSS) of the run's processes",
    ]
    # seconds since the first sample
    np.testing.assert_allclose(sys_specs[0].traces[0][1], [0.0, 0.5, 1.0, 1.5])
    assert [t[0] for s in sys_specs for t in s.traces] == [run_charts.CPU_TRACE] * 2
    np.testing.assert_allclose(sys_specs[1].traces[0][2], [300.0, 310.0, 320.0, 330.0])
    assert sys_specs[0].y_range is None  # CPU use may pass 100 % of one core
    assert note and "CPU" in note


def test_gpu_charts_one_trace_per_gpu(tmp_path):
    run = tmp_path / "run"
    _write(
        run / "sys",
        {
            "sys/gpu0/util_pct": [10, 90, 95],
            "sys/gpu1/util_pct": [0, 80, 85],
            "sys/gpu0/mem_used_mib": [100, 2000, 2100],
            "sys/gpu1/mem_used_mib": [100, 1500, 1600],
            "sys/cpu_pct": [100, 100, 100],
        },
    )
    _, sysd = split_sys(_read(run))
    specs, note = run_charts.sys_charts(sysd)
    assert note is None
    util = specs[0]
    assert util.title == "GPU utilisation" and util.y_range == (0.0, 100.0)
    assert [t[0] for t in util.traces] == ["gpu0", "gpu1"]
    np.testing.assert_allclose(util.traces[1][2], [0, 80, 85])
    assert specs[1].title == "GPU memory used"


def test_link_traffic_is_drawn_per_gpu_where_the_driver_gave_it(tmp_path):
    run = tmp_path / "run"
    _write(
        run / "sys",
        {
            "sys/gpu0/util_pct": [90, 95, 97],
            "sys/gpu0/pcie_rx_mib_s": [2100.0, 2200.0, 2150.0],  # DP's GPU 0 takes in the most
            "sys/gpu1/pcie_rx_mib_s": [300.0, 310.0, 290.0],
            "sys/gpu0/pcie_tx_mib_s": [50.0, 60.0, 55.0],
        },
    )
    _, sysd = split_sys(_read(run))
    specs = {s.title: s for s in run_charts.sys_charts(sysd)[0]}
    assert set(specs) == {"GPU utilisation", "GPU PCIe receive", "GPU PCIe transmit"}  # no NVLink
    rx = specs["GPU PCIe receive"]
    assert [t[0] for t in rx.traces] == ["gpu0", "gpu1"] and rx.y_title == "MiB/s"
    np.testing.assert_allclose(rx.traces[1][2], [300.0, 310.0, 290.0])


def test_sys_charts_empty_without_samples():
    assert run_charts.sys_charts({}) == ([], None)


def test_failure_box_states():
    assert live.failure_box(rec(state="succeeded")) is None
    box = live.failure_box(
        rec(
            state="failed",
            diagnosis={
                "key": "rank_crash",
                "cause": "Rank 1 raised.",
                "fix": "Read it.",
                "rank": 1,
            },
        )
    )
    assert box["rank"] == 1 and box["cause"] == "Rank 1 raised."
    bare = live.failure_box(rec(state="failed", exit_code=3))
    assert "code 3" in bare["cause"] and bare["fix"]
    lost = live.failure_box(rec(state="lost"))
    assert "supervisor" in lost["cause"]


def test_ui_text_formatting():
    from lab.views import text as ui_text

    assert ui_text.fmt_duration(83) == "1:23" and ui_text.fmt_duration(3723) == "1:02:03"
    assert ui_text.fmt_duration(None) == "–" and ui_text.fmt_duration(float("nan")) == "–"
    assert ui_text.fmt_mib(3174.4) == "3.1 GiB" and ui_text.fmt_bytes(512) == "512 B"
    assert (
        ui_text.fmt_rate(812.5) == "812 samples/s" and ui_text.fmt_rate(12.34) == "12.3 samples/s"
    )
    assert ui_text.md_escape("train/<class>/* a_b $x") == r"train/\<class\>/\* a\_b \$x"
    from datetime import datetime, timezone

    now = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
    assert ui_text.fmt_ago("2026-11-29T11:57:00+00:00", now) == "3 min ago"
    assert (
        ui_text.fmt_ago("2026-11-27T12:00:00Z", now) == "2 d ago"
        and ui_text.fmt_ago("junk", now) == "–"
    )
    line = ui_text.shell_line(["py", "-m", "x", "--name", "a b", "--amp"], {"K": "v w"}, cwd="/r")
    assert line == "cd /r\nK='v w' \\\n  py -m x \\\n  --name 'a b' \\\n  --amp"


def test_fallback_note_when_dp_ran_on_one_device():
    summ = {
        "mode": "dp",
        "effective_mode": "single",
        "effective_mode_reason": "DataParallel needs at least two GPUs; 0 visible",
    }
    assert live.fallback_note(rec(state="succeeded", mode="dp", summary=summ)) == (
        "Asked for dp, ran as single: DataParallel needs at least two GPUs; 0 visible."
    )
    assert (
        live.fallback_note(rec(state="succeeded", summary={"mode": "ddp", "effective_mode": "ddp"}))
        is None
    )
    assert live.fallback_note(rec(state="running")) is None


def test_config_lines():
    r = rec(
        config={
            "mode": "ddp",
            "nproc": 2,
            "batch_size": 64,
            "extra_env": {"B": "2", "A": "1"},
            "name": "x",
        }
    )
    assert live.config_lines(r) == [
        "mode: ddp",
        "nproc: 2",
        "batch_size: 64",
        "extra_env: A=1, B=2",
    ]
