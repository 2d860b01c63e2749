"""The scaling view of a device-count sweep: throughput and efficiency against the count with their
intervals, the ideal line, and the seeds' table, from a ``scaling_curve`` as ``compare --json``
gives it (the curve itself is tested on real runs in tests/test_sweep_devices.py)."""

from __future__ import annotations

import pytest

from lab.views.compare import modes, scaling_chart


def _point(mode: str, n: int, tp: tuple[float, float, float], base: float = 100.0) -> dict:
    low, med, high = tp
    sp = {"value": med / base, "ci_low": low / base, "ci_high": high / base}
    eff = {k: v / n for k, v in sp.items()}
    return {
        "mode": mode,
        "devices": n,
        "runs": [f"{mode}{n}"],
        "rate": "samples/s",
        "throughput": {"median": med, "ci_low": low, "ci_high": high},
        "speedup": sp,
        "efficiency": eff,
    }


CURVE = [
    _point("ddp", 1, (90, 95, 99)),
    _point("ddp", 2, (170, 180, 186)),
    _point("ddp", 4, (300, 320, 330)),
    _point("single", 1, (98, 100, 102)),
]


def test_throughput_has_intervals_colours_and_the_ideal_line():
    fig = scaling_chart.throughput_figure(CURVE)
    by_name = {t.name: t for t in fig.data}
    ddp = by_name["ddp"]
    assert list(ddp.x) == [1, 2, 4] and list(ddp.y) == [95, 180, 320]
    assert list(ddp.error_y.array) == [4, 6, 10] and list(ddp.error_y.arrayminus) == [5, 10, 20]
    assert ddp.line.color == modes.colour("ddp") != by_name["single"].line.color
    ideal = by_name[scaling_chart.IDEAL]
    assert list(ideal.x) == [1, 2, 4] and list(ideal.y) == [100, 200, 400]  # N x single


def test_efficiency_is_speedup_over_devices_with_its_interval():
    fig = scaling_chart.efficiency_figure(CURVE)
    ddp = next(t for t in fig.data if t.name == "ddp")
    assert list(ddp.y) == pytest.approx([0.95, 0.9, 0.8])
    assert list(ddp.error_y.array) == pytest.approx([0.04, 0.03, 0.025])


def test_the_seeds_table_has_a_row_per_count_and_a_column_per_mode():
    t = scaling_chart.table(CURVE)
    assert list(t["devices"]) == [1, 2, 4]
    assert list(t.columns) == ["devices", "ddp (samples/s)", "single (samples/s)"]
    assert t["ddp (samples/s)"][2] == "320.0 (300.0–330.0), 80% efficient"
    assert t["single (samples/s)"][1] == ""  # single ran at one count only
    assert scaling_chart.table([]) is None


def test_without_a_baseline_there_is_no_ideal_line_and_nothing_raises():
    curve = [p for p in CURVE if p["mode"] != "single"]
    names = [t.name for t in scaling_chart.throughput_figure(curve).data]
    assert names == ["ddp"]


def test_on_the_cpu_the_ideal_line_says_what_it_assumes():
    cpu = [dict(p, on_gpus=False) for p in CURVE]
    names = {t.name for t in scaling_chart.throughput_figure(cpu).data}
    assert scaling_chart.IDEAL_CPU in names and scaling_chart.IDEAL not in names
    assert "free cores" in scaling_chart.IDEAL_CPU
    gpu = [dict(p, on_gpus=True) for p in CURVE]
    assert scaling_chart.IDEAL in {t.name for t in scaling_chart.throughput_figure(gpu).data}


def test_dp_counts_the_devices_the_run_really_had():
    from types import SimpleNamespace

    from lab.views.compare.repeats import devices, on_gpus

    def run(summary=None, **config):
        return SimpleNamespace(summary=summary, option=lambda k: config.get(k))

    slurm_dp = run(mode="dp", gpus=[], gpus_per_node=4, backend="slurm")
    assert devices(slurm_dp) == 4 and on_gpus(slurm_dp)
    ran = run({"devices": ["cuda:0", "cuda:1"]}, mode="dp", gpus=[], gpus_per_node=4)
    assert devices(ran) == 2
    fell_back = run({"devices": ["cuda:0"]}, mode="dp", gpus=[0, 1])
    assert devices(fell_back) == 1
    cpu = run({"devices": ["cpu0", "cpu1"]}, mode="ddp", nproc=2)
    assert devices(cpu) == 2 and not on_gpus(cpu)
