"""FSDP's communication in the breakdown (training/comm_split.py, training/collectives.py): its
all-gathers in forward and in backward and its reduce-scatters, each waited for or hidden.

Three kinds of trace: a real one (tests/data/fsdp_gloo_cpu, two ranks of a profiled tinycnn fsdp
run recorded on this CPU-only machine with gloo), a hand-made CPU trace in the shape that one has,
and a hand-made CUDA trace: synthetic, because no GPU exists here to record NCCL's kernels, named
as the profiler names them (``ncclDevKernel_AllGather_…``, ``ncclDevKernel_ReduceScatter_…``).
Times are in microseconds as in a trace; figures come out in milliseconds per step.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from training import breakdown, comm_split
from training.breakdown import combine, rank_figures
from training.collectives import backend_calls

DATA = Path(__file__).parent / "data" / "fsdp_gloo_cpu"
MAIN = {"pid": 1, "tid": 1}
GLOO = {"pid": 1, "tid": 2}
SPLIT = comm_split.KEYS


def x(name: str, ts: float, dur: float, cat: str = "cpu_op", where=MAIN, **args) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, **where, "args": args}


def ann(name: str, ts: float, dur: float, where=MAIN, **args) -> dict:
    return x(name, ts, dur, "user_annotation", where, **args)


def gloo(op: str, ts: float, dur: float, floats: int) -> dict:
    return ann(f"gloo:{op}", ts, dur, GLOO, **{"Input Dims": [[floats]], "Input type": ["float"]})


def cpu_trace() -> dict:
    """One step of an fsdp rank on the CPU, as FSDP2 and gloo record it (see the real one)."""
    return {
        "traceEvents": [
            ann("ProfilerStep#4", 0, 10_000),
            ann("forward", 0, 3000),
            ann("backward", 3000, 6000),
            # forward: FSDP waits for the all-gather inside its own range
            ann("FSDP::all_gather (features)", 50, 1000),
            x("c10d::_allgather_base_", 100, 100),
            gloo("all_gather", 150, 850, 250),
            # backward: the pre-backward hook runs inside an autograd op, which is busy to the
            # profiler, yet the main thread waits in FSDP::all_gather
            x("autograd::engine::evaluate_function: AddmmBackward0", 3000, 2000),
            ann("FSDP::all_gather (head)", 3100, 1000),
            x("c10d::_allgather_base_", 3200, 100),
            gloo("all_gather", 3250, 750, 250),
            # an all-gather that real work on the main thread hides (350 of its 600 µs)
            x("c10d::_allgather_base_", 5000, 50),
            gloo("all_gather", 5050, 550, 250),
            x("aten::mm", 5050, 350),
            # the reduce-scatter, run by gloo as an all-reduce of the whole gradient
            ann("FSDP::post_backward_reduce (features)", 5900, 1200),
            x("c10d::_reduce_scatter_base_", 6000, 100),
            gloo("all_reduce", 6050, 950, 1000),
            # the trainer's own all-reduce after backward: not FSDP's
            x("c10d::allreduce_", 9200, 50),
            gloo("all_reduce", 9210, 90, 1),
        ]
    }


def test_gloo_runs_the_reduce_scatter_as_an_all_reduce_and_the_issuing_op_names_it():
    events = cpu_trace()["traceEvents"]
    calls = [c for c in backend_calls(events, world_size=2) if c.ranged]
    assert [c.kind for c in calls] == ["all_gather"] * 3 + ["reduce_scatter", "all_reduce"]
    # nccl-tests' bytes: the gathered output (250 floats from each of 2 ranks), the reduced input
    assert [c.nbytes for c in calls] == [2000, 2000, 2000, 4000, 4]
    assert calls[3].ts == 6000 and calls[3].spans == ((6050, 7000), (6000, 6100))
    fig = rank_figures(cpu_trace(), 0, world_size=2)
    rows = {r["op"]: r for r in fig["collectives"]}
    assert set(rows) == {"all_gather", "reduce_scatter", "all_reduce"}
    assert rows["reduce_scatter"]["calls"] == 1.0 and rows["reduce_scatter"]["bytes"] == 4000
    assert rows["all_gather"]["calls"] == 3.0 and rows["all_gather"]["bytes"] == 6000


def test_cpu_split_waits_inside_fsdps_own_ranges_and_is_hidden_only_by_real_work():
    ph = rank_figures(cpu_trace(), 0, world_size=2)["phases_ms"]
    got = {k: ph[k] for k in SPLIT}
    assert got == pytest.approx(
        {
            "comm_all_gather_fwd_exposed": 0.9,  # 100..1000
            "comm_all_gather_fwd_hidden": 0.0,
            # 3200..4000 inside AddmmBackward0 but waited for; 5000..5050 and 5400..5600
            "comm_all_gather_bwd_exposed": 0.8 + 0.25,
            "comm_all_gather_bwd_hidden": 0.35,  # under aten::mm
            "comm_reduce_scatter_exposed": 0.95 + 0.05,  # 6000..7000
            "comm_reduce_scatter_hidden": 0.0,
        }
    )
    # the split is a part of comm_total: the trainer's all-reduce (9200..9300) is the rest
    assert sum(got.values()) == pytest.approx(ph["comm_total"] - 0.1)
    assert sum(v for k, v in got.items() if k.endswith("_exposed")) == pytest.approx(
        ph["comm_exposed"] - 0.1
    )


def kernel(name: str, ts: float, dur: float, device: int) -> dict:
    return x(name, ts, dur, "kernel", {"pid": device, "tid": 7}, device=device)


AG, RS = "ncclDevKernel_AllGather_RING_LL", "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL"


def test_cuda_split_from_nccl_kernel_names_on_each_device_synthetic():
    """Synthetic (no GPU here): device 0 overlaps an all-gather and a reduce-scatter with
    compute, and prefetches an all-gather while a reduce-scatter runs; device 1 all-gathers once.
    Each device's figures, then their mean, as comm_total's."""
    trace = {
        "traceEvents": [
            ann("ProfilerStep#4", 0, 10_000),
            ann("forward", 0, 4000),
            ann("backward", 4000, 5000),
            kernel("void at::native::conv_kernel", 500, 1000, 0),
            kernel(AG, 1000, 1000, 0),  # forward; 1000..1500 under compute
            kernel(AG, 4200, 600, 0),  # backward, alone
            kernel("void at::native::gemm_kernel", 5000, 1000, 0),
            kernel(RS, 5500, 1500, 0),  # 5500..6000 under compute
            kernel(AG, 6500, 1000, 0),  # prefetched: 6500..7000 is the reduce-scatter's
            kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 9500, 200, 0),  # not split
            kernel(AG, 100, 200, 1),
        ]
    }
    ph = rank_figures(trace, 0, world_size=2)["phases_ms"]
    assert {k: ph[k] for k in SPLIT} == pytest.approx(
        {
            "comm_all_gather_fwd_exposed": (0.5 + 0.2) / 2,
            "comm_all_gather_fwd_hidden": (0.5 + 0.0) / 2,
            "comm_all_gather_bwd_exposed": (0.6 + 0.5) / 2,
            "comm_all_gather_bwd_hidden": 0.0,
            "comm_reduce_scatter_exposed": 1.0 / 2,
            "comm_reduce_scatter_hidden": 0.5 / 2,
        }
    )
    assert ph["comm_total"] == pytest.approx((3.8 + 0.2) / 2)
    assert ph["comm_exposed"] == pytest.approx((2.8 + 0.2) / 2)


def test_a_ddp_trace_has_no_split():
    trace = {
        "traceEvents": [
            ann("ProfilerStep#4", 0, 1000),
            ann("backward", 0, 900),
            x("c10d::allreduce_", 100, 50),
            gloo("all_reduce", 120, 500, 1000),
        ]
    }
    ph = rank_figures(trace, 0, world_size=2)["phases_ms"]
    assert ph["comm_total"] > 0 and all(ph[k] == 0.0 for k in SPLIT)
    assert set(ph) == set(breakdown.KEYS)


@pytest.fixture(scope="module")
def recorded() -> dict:
    """breakdown.json's figures of the recorded fsdp run, computed from its two traces."""
    ranks = []
    for r in (0, 1):
        with gzip.open(DATA / f"trace_rank{r}.json.gz", "rt") as f:
            ranks.append(rank_figures(json.load(f), r, world_size=2))
    return combine((3, 6), ranks, "cpu", "fsdp", 2, None)


def test_recorded_fsdp_run_splits_all_its_communication(recorded):
    for r in [recorded, *recorded["per_rank"]]:
        ph = r["phases_ms"]
        split = {k: ph[k] for k in SPLIT}
        assert all(split[f"{k}_exposed"] > 0 for k in comm_split.SPLIT), ph
        # FSDP2 on gloo waits for every collective it issues: none of it is hidden on the CPU
        assert all(split[f"{k}_hidden"] == 0.0 for k in comm_split.SPLIT), ph
        # nothing else communicated in these steps (no logging step): the split is all of it
        assert sum(split.values()) == pytest.approx(ph["comm_total"], abs=1e-3)
        assert ph["comm_exposed"] == pytest.approx(ph["comm_total"], abs=1e-3)
        assert ph["comm_all_gather_fwd_exposed"] <= ph["forward"] + 1e-3
        bwd = ph["comm_all_gather_bwd_exposed"] + ph["comm_reduce_scatter_exposed"]
        assert bwd <= ph["backward"] + 1e-3


def test_recorded_fsdp_run_moves_its_units_parameters(recorded):
    """tinycnn's units hold 19,200 and 5,160 bytes of parameters (training.linkcheck.unit_sizes
    says so too): each step gathers both twice (forward, then backward after resharding) and
    reduce-scatters both once; no all-reduce is left (gloo's is the reduce-scatter)."""
    from training import linkcheck, models

    units = linkcheck.unit_sizes(models.build("tinycnn", 1, 10), 2)
    assert units == [("features", 19_200), ("head", 5_160)]
    rows = recorded["collectives"] + recorded["collectives_min"]
    assert {r["op"] for r in rows} == {"all_gather", "reduce_scatter"}
    for r in rows:
        per_step = 2 if r["op"] == "all_gather" else 1
        assert r["calls"] == 2 * per_step and r["bytes"] == per_step * 24_360, r
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] / 2, abs=1e-4)  # (n-1)/n
