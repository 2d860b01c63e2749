"""training/collectives.py on hand-made traces: bytes from recorded shapes (gloo) or
record_param_comms (NCCL), only calls inside the profiled steps, per step, and nccl-tests' bus
bandwidth factors."""

from __future__ import annotations

import pytest

from training.breakdown import combine, rank_figures
from training.collectives import bus_factor, rank_collectives


def ev(name, ts, dur, cat="user_annotation", tid=1, **args):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "cat": cat, "pid": 1, "tid": tid,
            "args": args}  # fmt: skip


def gloo(op, ts, dur, n, dtype="float"):
    return ev(f"gloo:{op}", ts, dur, tid=2, **{"Input Dims": [[n]], "Input type": [dtype]})


def test_bus_factors_are_nccl_tests():
    assert bus_factor("all_reduce", 4) == pytest.approx(1.5)
    assert bus_factor("all_reduce", 2) == 1.0 and bus_factor("all_gather", 4) == 0.75
    assert bus_factor("broadcast", 8) == 1.0 and bus_factor("all_reduce", 1) == 1.0


def test_gloo_calls_per_step_inside_the_window_only():
    window = [(0.0, 1000.0), (1000.0, 2000.0)]
    events = [
        gloo("all_reduce", 100, 250, 250_000),  # 1 MB in 250 us = 4 GB/s
        gloo("all_reduce", 1100, 250, 250_000),
        gloo("all_reduce", 5000, 10, 999),  # after the window: not counted
        gloo("broadcast", 10, 100, 10, dtype="double"),
    ]
    rows = {r["op"]: r for r in rank_collectives(events, window, 2, rank=1, world_size=4)}
    ar = rows["all_reduce"]
    assert ar == {"op": "all_reduce", "rank": 1, "calls": 1.0, "bytes": 1_000_000,
                  "total_ms": 0.25, "algbw_gbps": 4.0, "busbw_gbps": 6.0}  # fmt: skip
    assert rows["broadcast"]["bytes"] == 40 and rows["broadcast"]["calls"] == 0.5


def test_nccl_kernels_take_their_bytes_from_record_param_comms():
    window = [(0.0, 1000.0)]
    events = [
        ev(
            "record_param_comms",
            5,
            1,
            cat="cpu_op",
            **{"Collective name": "allreduce", "In msg nelems": 1000, "dtype": "Float"},
        ),  # fmt: skip
        ev("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 20, 2, cat="kernel", tid=7),
        ev("void at::native::elementwise_kernel", 30, 5, cat="kernel", tid=7),
    ]
    (row,) = rank_collectives(events, window, 1, rank=0, world_size=2)
    assert row["op"] == "all_reduce" and row["bytes"] == 4000 and row["algbw_gbps"] == 2.0


def test_breakdown_carries_every_ranks_rows_and_keeps_per_rank_keys():
    trace = {"traceEvents": [ev("ProfilerStep#3", 0, 1000), gloo("all_reduce", 100, 500, 1000)]}
    mine = rank_figures(trace, 0, world_size=2)
    other = {**mine, "rank": 1, "collectives": [{**mine["collectives"][0], "rank": 1}]}
    b = combine((3, 4), [other, mine], "cpu", "ddp", 2, None)
    assert [c["rank"] for c in b["collectives"]] == [0, 1]
    keys = {"rank", "step_ms", "phases_ms", "comm_by_device_ms"}
    assert all(set(r) == keys for r in b["per_rank"])
    assert b["collectives"][0]["bytes"] == 4000 and b["collectives"][0]["busbw_gbps"] == 0.008


def test_dp_broadcast_and_reduce_add_take_their_bytes_from_the_ops_input_shapes():
    # DataParallel's autograd ops as the profiler records them (record_shapes): no
    # record_param_comms, the tensors in Input Dims, ReduceAddCoalesced's num_inputs concrete
    window = [(0.0, 1000.0)]
    events = [
        ev("Broadcast", 5, 50, cat="cpu_op", **{
            "Input Dims": [[], [250], [100, 10]], "Input type": ["ScalarList", "float", "float"],
            "Concrete Inputs": ["[0, 1]", "", ""]}),
        ev("ncclDevKernel_Broadcast_RING_LL", 20, 2, cat="kernel", tid=7),
        ev("ncclDevKernel_Broadcast_RING_LL", 21, 2, cat="kernel", tid=8),
        ev("ReduceAddCoalesced", 300, 50, cat="cpu_op", **{
            "Input Dims": [[], [], [250], [100, 10], [250], [100, 10]],
            "Input type": ["Scalar", "Scalar", "float", "float", "float", "float"],
            "Concrete Inputs": ["0", "2", "", "", "", ""]}),
        ev("ncclDevKernel_Reduce_Sum_f32_RING_LL", 320, 5, cat="kernel", tid=7),
    ]  # fmt: skip
    rows = {r["op"]: r for r in rank_collectives(events, window, 1, rank=0, world_size=1)}
    assert rows["broadcast"]["bytes"] == 5000  # 1250 floats, once (on its first kernel)
    assert rows["broadcast"]["calls"] == 2 and rows["broadcast"]["algbw_gbps"] == 1.25
    assert rows["reduce"]["bytes"] == 5000 and rows["reduce"]["algbw_gbps"] == 1.0


def test_each_call_takes_its_shortest_duration_over_the_ranks():
    # rank 0 arrived early at call 1 (waited 400 µs), rank 1 early at call 2
    r0 = {"traceEvents": [ev("ProfilerStep#3", 0, 2000), gloo("all_reduce", 100, 500, 1000),
                          gloo("all_reduce", 900, 100, 1000)]}  # fmt: skip
    r1 = {"traceEvents": [ev("ProfilerStep#3", 0, 2000), gloo("all_reduce", 500, 100, 1000),
                          gloo("all_reduce", 700, 300, 1000)]}  # fmt: skip
    b = combine((3, 4), [rank_figures(r0, 0, 2), rank_figures(r1, 1, 2)], "cpu", "ddp", 2, None)
    (fast,) = b["collectives_min"]
    assert fast["rank"] == "min" and fast["calls"] == 2 and fast["bytes"] == 8000
    assert fast["total_ms"] == 0.2  # 100 + 100 µs, not either rank's 600 or 400
    assert {r["total_ms"] for r in b["collectives"]} == {0.6, 0.4}
    assert all("calls" not in r for r in b["per_rank"])


def test_cuda_all_gather_is_mapped_and_counts_its_gathered_output():
    window = [(0.0, 1000.0)]
    comms = {"Collective name": "_allgather_base", "In msg nelems": 250, "dtype": "Float"}
    events = [
        ev("record_param_comms", 5, 1, cat="cpu_op", **comms, **{"Out msg nelems": 1000}),
        ev("ncclDevKernel_AllGather_RING_LL", 20, 2, cat="kernel", tid=7),
        ev("record_param_comms", 40, 1, cat="cpu_op", **dict(comms, **{
            "Collective name": "reduce_scatter_tensor_coalesced", "In msg nelems": 1000})),
        ev("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", 50, 2, cat="kernel", tid=7),
    ]  # fmt: skip
    rows = {r["op"]: r for r in rank_collectives(events, window, 1, rank=0, world_size=4)}
    assert rows["all_gather"]["bytes"] == 4000  # the output, 4 x 250 floats
    assert rows["reduce_scatter"]["bytes"] == 4000
