"""Memory that compares on the CPU (issue 53): every CPU run's resident set follows what is live.

``training.memory.Measure`` sets glibc's mmap threshold before its baseline (what the fsdp sample
runs' ``MALLOC_MMAP_THRESHOLD_=65536`` did for them alone), summary.json's ``memory`` records it in
``cpu_allocator``, and Compare's memory words say how each chosen run was measured. The figures
(resnet18, 32 px, 2 ranks, 4 steps: fsdp's peak per rank above DDP's before, below after) are in
docs/guide.md; this file checks the mechanism: the resident set in a fresh process each, the rest
in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from lab.runfolder import REPO_ROOT
from lab.views.compare import memory as compare_memory
from tests.helpers.compare_runs import load_run, make_run
from training import memory


def _cpu() -> SimpleNamespace:
    return SimpleNamespace(
        effective_mode="single",
        device_names=["cpu0"],
        per_device_batch=8,
        device=torch.device("cpu"),
    )


# a fresh process: glibc's dynamic threshold rises past 1 MiB once such a block is freed, after
# which freed blocks may stay in its heap (whether they do depends on what lies above them: not a
# claim a test can make); with the trainer's threshold they go back to the system, every time
CHILD = """
import gc, json, os
from types import SimpleNamespace

import torch

from training import memory

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

cpu = SimpleNamespace(device_names=["cpu0"], device=torch.device("cpu"))
allocator = memory.Measure(cpu).allocator
torch.ones(2**18).sum()  # glibc's default would raise its threshold past 1 MiB here
rounds, kept = [], []  # kept: small tensors that stay live between the big ones, as a step's do
for _ in range(2):
    before = rss()
    held = []
    for _ in range(64):  # 64 blocks of 1 MiB, each touched
        held.append(torch.ones(2**18))
        kept.append(torch.ones(1024))
    risen = rss()
    del held
    gc.collect()
    rounds.append((risen - before, rss() - before))
print(json.dumps({"allocator": allocator, "rounds": rounds}))
"""


def _child() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    env.pop("COVERAGE_PROCESS_CONFIG", None)  # a tracer's own memory is not the claim
    r = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(r.stdout.splitlines()[-1])


@pytest.mark.proc
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="Linux's resident set")
def test_the_cpu_measure_makes_freed_tensors_leave_the_resident_set():
    measured = _child()
    if measured["allocator"] is None:
        pytest.skip("not glibc: no mallopt")
    assert measured["allocator"] == {"mmap_threshold": 65536}
    for risen, left in measured["rounds"]:
        assert risen >= 48 and left < 16, measured  # resident while live, gone when freed


def test_the_cpu_measure_says_it_set_the_threshold():
    m = memory.Measure(_cpu())
    if m.allocator is None:
        pytest.skip("not glibc: no mallopt")
    assert m.allocator == {"mmap_threshold": 65536}
    assert "64 KiB or more given back" in m.measured()


def test_the_memory_block_records_the_allocator_only_where_it_was_set():
    per = {"cpu0": {"estimate": {"total": 10.0}, "peak": 30.0, "baseline": 20.0}}
    got = memory.block(per, "cpu: ...", {"mmap_threshold": 65536})
    assert got["cpu_allocator"] == {"mmap_threshold": 65536}
    assert got["ratio"] == {"cpu0": 1.0}
    assert "cpu_allocator" not in memory.block(per, "cuda: ...")  # GPUs: nothing to record


CPU_MEMORY = {
    "estimate_mib": {"cpu0": {"parameters": 1.0, "activations": 9.0, "total": 10.0}},
    "peak_mib": {"cpu0": 780.0},
    "baseline_mib": {"cpu0": 755.0},
    "measured": "cpu: the process's peak resident set (VmHWM) since just before the model",
}


def _run(tmp_path, name: str, allocator: dict | None, devices=("cpu0",), measured=None):
    d = make_run(tmp_path, name, devices=devices)
    s = json.loads((d / "summary.json").read_text())
    s["memory"] = dict(CPU_MEMORY, measured=measured or CPU_MEMORY["measured"])
    if allocator:
        s["memory"]["cpu_allocator"] = allocator
    (d / "summary.json").write_text(json.dumps(s))
    return load_run(d)


def test_compare_says_how_the_cpu_figures_were_measured(tmp_path):
    new = _run(tmp_path, "new", {"mmap_threshold": 65536})
    old = _run(tmp_path, "old", None)
    gpu = _run(tmp_path, "gpu", None, ("cuda0",), "cuda: torch.cuda.max_memory_allocated")
    names = {r.key: r.key.split("/")[-1] for r in (new, old, gpu)}
    both = compare_memory.intro([new, old, gpu], names)
    assert both.startswith(compare_memory.INTRO)
    assert "follows what is live" in both and "(64 KiB" in both
    assert f"{names[old.key]}: recorded without it, so its CPU peak" in both
    assert names[gpu.key] not in both  # a GPU's allocator peak has no kept heap to explain
    only_new = compare_memory.intro([new], names)
    assert "follows what is live" in only_new and "recorded without it" not in only_new
    assert compare_memory.intro([gpu], names) == compare_memory.INTRO
