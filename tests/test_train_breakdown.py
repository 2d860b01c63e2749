"""The breakdown's method on hand-made Chrome traces, where every right answer is known in advance.

Real runs (tests/test_train_profile.py) show the method works on what the
profiler writes on this machine; these pin down the arithmetic, including the
CUDA path that cannot run here: NCCL kernels overlapping compute kernels,
DataParallel's ops, comm ops nested in busy parents, clipping to the steps.
Times are in microseconds as in a trace; figures come out in milliseconds.
"""

from __future__ import annotations

import pytest

from training.breakdown import KEYS, combine, intersect, rank_figures, subtract, union

MAIN = {"pid": 7, "tid": 7}


def x(name: str, ts: float, dur: float, cat: str = "cpu_op", **where) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, **(where or MAIN)}


def ann(name: str, ts: float, dur: float, **where) -> dict:
    return x(name, ts, dur, "user_annotation", **where)


def one_step(*events: dict, dur: float = 10_000) -> dict:
    """A trace of one step, ProfilerStep#4, from 0 to ``dur`` µs on the main thread."""
    return {"traceEvents": [ann("ProfilerStep#4", 0, dur), *events]}


def test_interval_arithmetic():
    a = union([(5, 8), (0, 2), (1, 3), (8, 9), (4, 4)])
    assert a == [(0, 3), (5, 9)]
    assert intersect(a, [(2, 6)]) == [(2, 3), (5, 6)]
    assert subtract(a, [(1, 2), (6, 7), (8, 20)]) == [(0, 1), (2, 3), (5, 6), (7, 8)]
    assert subtract([(0, 10)], []) == [(0, 10)] and subtract([], [(0, 1)]) == []


def test_phases_and_other_of_a_cpu_step():
    fig = rank_figures(
        one_step(
            ann("data", 0, 1000),
            ann("forward", 1000, 3000),
            ann("optimizer", 4000, 500),
            ann("backward", 4500, 4000),
            ann("optimizer", 8500, 1000),
        ),
        rank=3,
    )
    assert fig["rank"] == 3 and fig["step_ms"] == 10.0 and set(fig["phases_ms"]) == set(KEYS)
    ph = fig["phases_ms"]
    # two optimizer ranges
    assert (ph["data"], ph["forward"], ph["backward"], ph["optimizer"]) == (1.0, 3.0, 4.0, 1.5)
    assert ph["other"] == 0.5 and ph["comm_total"] == ph["comm_exposed"] == 0.0


def test_gloo_comm_total_and_the_part_the_main_thread_waited_for():
    """DDP on CPU: the all-reduce launches inside AccumulateGrad, runs on a gloo thread, backward
    waits at its end."""
    worker = {"pid": 7, "tid": 99}
    trace = one_step(
        ann("backward", 2000, 7000),
        x("aten::convolution_backward", 2000, 2000),
        x("autograd::engine::evaluate_function: AccumulateGrad", 4000, 1000),
        # nested in the busy parent: the main thread waits for the launch
        x("c10d::allreduce_", 4200, 600),
        x("aten::threshold_backward", 5000, 1000),
        ann("gloo:all_reduce", 4300, 4200, **worker),  # 4300..8500; main thread idle from 6000
        x("torch.distributed.ddp.reducer::copy_bucket_to_grad", 8500, 300),
    )
    ph = rank_figures(trace, 0)["phases_ms"]
    assert ph["comm_total"] == pytest.approx(4.3)  # 4200..8500
    assert ph["comm_exposed"] == pytest.approx(0.6 + 2.5)  # the launch, then 6000..8500


def test_cuda_comm_exposed_is_nccl_time_without_compute_kernels():
    gpu = {"pid": 0, "tid": 7}
    trace = one_step(
        x("void at::native::conv_kernel<float>", 1000, 5000, "kernel", **gpu),  # 1000..6000
        x(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            4000,
            5000,
            "kernel",
            pid=0,
            tid=20,
        ),  # 4000..9000: the first 2 ms overlap compute
        # CPU side of a CUDA run: the kernels are the measure, not this
        x("c10d::allreduce_", 3000, 100),
        x("Memcpy HtoD (Pageable -> Device)", 8000, 500, "gpu_memcpy", **gpu),
    )
    ph = rank_figures(trace, 0)["phases_ms"]
    assert ph["comm_total"] == pytest.approx(5.0) and ph["comm_exposed"] == pytest.approx(3.0)


def test_cuda_exposed_comm_is_per_device_then_averaged():
    """DataParallel: one process, two GPUs. GPU 1's compute must not hide GPU 0's NCCL kernel
    (a union over devices would call GPU 0's all-reduce hidden)."""
    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    trace = one_step(
        x("conv_kernel", 0, 4000, "kernel", pid=0, tid=7),  # GPU 0 computes 0..4000
        x(nccl, 4000, 4000, "kernel", pid=0, tid=20),  # then waits on NCCL 4000..8000
        x("conv_kernel", 4000, 4000, "kernel", pid=1, tid=7),  # GPU 1 computes meanwhile
        x(nccl, 8000, 1000, "kernel", pid=1, tid=20),  # and waits 8000..9000
    )
    fig = rank_figures(trace, 0)
    by = fig["comm_by_device_ms"]
    assert by["0"] == {"comm_total": 4.0, "comm_exposed": 4.0}
    assert by["1"] == {"comm_total": 1.0, "comm_exposed": 1.0}
    ph = fig["phases_ms"]
    assert ph["comm_total"] == pytest.approx(2.5) and ph["comm_exposed"] == pytest.approx(2.5)


def test_dataparallel_phases_come_from_its_ops_on_the_main_thread():
    trace = one_step(
        x("Scatter", 100, 400),
        x("Broadcast", 600, 900),
        x("Gather", 3000, 250),
        x("Broadcast", 700, 100),  # nested in the first: counted once
        # backward op; another thread
        x("ScatterBackward", 6000, 300),
        x("Gather", 1000, 5000, tid=55, pid=7),
    )
    ph = rank_figures(trace, 0)["phases_ms"]
    assert (ph["dp_scatter"], ph["dp_replicate"], ph["dp_gather"]) == (0.4, 0.9, 0.25)


def test_only_the_steps_count_and_figures_are_per_step():
    trace = {
        "traceEvents": [
            ann("ProfilerStep#3", 0, 4000),
            ann("ProfilerStep#4", 5000, 6000),
            ann("forward", 0, 2000),
            ann("forward", 5000, 2000),
            ann("forward", 20_000, 9000),  # after the window: not a step of it
            ann("gloo:all_reduce", 10_000, 3000, pid=7, tid=9),  # half inside the second step
        ]
    }
    fig = rank_figures(trace, 0)
    assert (
        fig["step_ms"] == 5.0
        and fig["phases_ms"]["forward"] == 2.0
        and fig["phases_ms"]["comm_total"] == 0.5
    )
    # no profiled step at all
    assert rank_figures({"traceEvents": [ann("forward", 0, 10)]}, 0) is None


def test_combine_is_the_mean_over_ranks_with_every_rank_kept():
    r0 = {"rank": 0, "step_ms": 4.0, "phases_ms": dict.fromkeys(KEYS, 1.0)}
    r1 = {"rank": 1, "step_ms": 6.0, "phases_ms": dict.fromkeys(KEYS, 2.0)}
    out = combine((3, 6), [r1, r0], device="cpu", effective_mode="ddp", world_size=2, note=None)
    assert (
        out["steps"] == [3, 6]
        and out["step_ms"] == 5.0
        and out["phases_ms"] == dict.fromkeys(KEYS, 1.5)
    )
    assert [r["rank"] for r in out["per_rank"]] == [0, 1] and out["note"] is None
    assert out["traces"] == ["profile/trace_rank0.json.gz", "profile/trace_rank1.json.gz"]
