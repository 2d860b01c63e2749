"""The ``memory_creep`` health finding: lab/engine/health/creep.py's rule on synthetic series,
lab/engine/health/rules.py's finding, and, for real, a user's script that keeps every step's loss
tensor alive (its graph and activations with it) launched through the lab and its supervisor
(lab/engine/health/watch.py keeps the supervisor's ``sys/rss_mib`` samples), beside the same
script done right, which must not be flagged."""

from __future__ import annotations

import math
import random
import textwrap

import pytest

from lab import tags
from lab.engine import registry
from lab.engine.health import creep, rules
from lab.engine.health.watch import HealthWatch
from lab.engine.launch import launcher
from lab.engine.scalars import ScalarWriter
from lab.engine.spec.run import script_run
from lab.events import LogdirReader
from tests.helpers.engine_runs import alive_of, state, wait_for

FINAL = ("succeeded", "failed", "stopped", "lost")


def series(f, seconds: float = 120.0, every: float = 1.0) -> list[tuple[float, float]]:
    """(epoch seconds, MiB) samples of ``f(t)`` every ``every`` seconds."""
    t0 = 1_700_000_000.0
    return [(t0 + i * every, f(i * every)) for i in range(int(seconds / every) + 1)]


def warm(t: float) -> float:
    """Start-up: 20 MiB to 700 MiB over the first 8 s (torch loads, the first batches)."""
    return 20 + 680 * min(1.0, t / 8)


def test_flat_after_warm_up_is_not_creep():
    assert creep.creep(series(warm)) is None


def test_rising_then_levelling_off_is_not_creep():
    # rises 300 MiB over the first minute after start-up, then flat for a minute
    assert creep.creep(series(lambda t: warm(t) + 300 * min(1.0, t / 60))) is None
    # a saturating curve too
    assert creep.creep(series(lambda t: warm(t) + 400 * (1 - math.exp(-t / 15)))) is None


def test_rising_at_a_steady_rate_is_creep_with_its_slope():
    ev = creep.creep(series(lambda t: warm(t) + 2.0 * t))  # 120 MiB per minute
    assert ev is not None and ev["slope_mib_per_min"] == pytest.approx(120, rel=0.02)
    assert ev["window_s"] >= creep.MIN_WINDOW_S and ev["samples"] >= creep.MIN_SAMPLES
    assert ev["to_mib"] > ev["from_mib"]


def test_noise_alone_is_not_creep_but_a_noisy_rise_is():
    rng = random.Random(0)
    # a flat series with +-40 MiB of scatter (workers restarting each epoch)
    assert creep.creep(series(lambda t: warm(t) + rng.uniform(-40, 40))) is None
    # stepwise, like an allocator taking blocks, under the same scatter: 60 MiB per minute
    ev = creep.creep(series(lambda t: warm(t) + 20 * (t // 20) + rng.uniform(-40, 40), 300))
    assert ev is not None and 40 < ev["slope_mib_per_min"] < 80


def test_slow_drift_short_runs_and_too_few_samples_are_not_creep():
    # 5 MiB per minute: allocator or event-buffer drift
    assert creep.creep(series(lambda t: warm(t) + t / 12)) is None
    # a steep rise, but only 20 s of run: all of it still warm-up
    assert creep.creep(series(lambda t: warm(t) + 5 * t, seconds=20)) is None
    assert creep.creep(series(lambda t: 100 + 5 * t, seconds=60, every=10)) is None  # 7 samples
    # steep in MiB/min, but a small share of a large GPU's used memory
    assert creep.creep(series(lambda t: 60_000 + warm(t) + 0.5 * t)) is None


def test_the_finding_names_the_series_and_says_why_in_the_seeds_words():
    ok, rising = series(warm), series(lambda t: warm(t) + 2.0 * t)
    obs = rules.Observation(now=0.0, started=0.0, alive=True, last_activity=0.0)
    found = rules.findings(
        rules.Observation(**{**obs.__dict__, "memory": {"sys/gpu0/mem_used_mib": ok}})
    )
    assert "memory_creep" not in {f.key for f in found}
    both = {"sys/gpu0/mem_used_mib": ok, "sys/gpu1/mem_used_mib": rising}
    f = next(
        f
        for f in rules.findings(rules.Observation(**{**obs.__dict__, "memory": both}))
        if f.key == "memory_creep"
    )
    assert f.evidence["series"] == "sys/gpu1/mem_used_mib" and "GPU1" in f.message
    assert "MiB per minute" in f.message and "level off" in f.message
    assert ".item()" in f.fix and "losses.append(loss)" in f.fix


def test_the_watch_keeps_gpu_samples_where_there_are_gpus_else_the_rss(tmp_path):
    w = HealthWatch(tmp_path, {"kind": "script"}, lambda **kw: None)
    w.memory.note({"sys/rss_mib": 500.0, "sys/cpu_pct": 50.0})
    assert list(w.memory.series(w._scalars)) == ["sys/rss_mib"]
    w.memory.note({"sys/rss_mib": 501.0, "sys/gpu3/mem_used_mib": 900.0, "sys/gpu3/util_pct": 9})
    assert list(w.memory.series(w._scalars)) == ["sys/gpu3/mem_used_mib"]
    many = [(float(i), 1.0) for i in range(creep.KEEP + 1)]
    assert len(creep.thin(many)) <= creep.KEEP and creep.thin(many)[-1] == many[-1]


def node_samples(run_dir, gpu_mib, host_mib) -> None:
    """What a Slurm job's node sampler writes on node 1 (its writer, its folder, its tags), every
    second for two minutes: GPU 3's used memory and the node's host memory."""
    pre = f"{tags.SYS_NODE}1/"
    writer = ScalarWriter(run_dir / "sys" / "node1")
    for i, ((wall, gpu), (_, host)) in enumerate(zip(series(gpu_mib), series(host_mib))):
        writer.add({f"{pre}gpu3/mem_used_mib": gpu, f"{pre}host_mem_used_mib": host}, i, wall)
    writer.close()


def test_a_slurm_job_watched_from_afar_is_judged_on_its_nodes_gpu_memory(tmp_path):
    """A Slurm job whose processes run on other nodes: the watch samples nothing itself (the
    Slurm watcher ticks with no values) and judges the GPU memory each node's sampler wrote; a
    node's host memory, which other jobs share, is never judged."""
    seen: dict = {}
    node_samples(tmp_path, lambda t: warm(t) + 2.0 * t, warm)
    HealthWatch(tmp_path, {"kind": "script"}, seen.update).tick(0, [], {}, [], alive=True)
    found = {f["key"]: f for f in seen.get("health", [])}
    assert found["memory_creep"]["evidence"]["series"] == "sys/node1/gpu3/mem_used_mib"
    assert found["memory_creep"]["message"].startswith("GPU3's memory on the job's node1 keeps")

    flat_gpu = tmp_path / "flat"
    node_samples(flat_gpu, warm, lambda t: warm(t) + 2.0 * t)
    seen.clear()
    HealthWatch(flat_gpu, {"kind": "script"}, seen.update).tick(0, [], {}, [], alive=True)
    assert "memory_creep" not in {f["key"] for f in seen.get("health", [])}

    # a watch that samples the run's processes itself judges those, not the nodes' files
    w = HealthWatch(tmp_path, {"kind": "script"}, seen.update)
    w.tick(0, [], {"sys/rss_mib": 500.0}, [], alive=True)
    assert list(w.memory.series(w._scalars)) == ["sys/rss_mib"]


SCRIPT = textwrap.dedent("""\
    # A user's training script; "leak" forgets torch.no_grad() in its evaluation and keeps each
    # step's evaluation loss as a tensor: every step's graph and activations stay alive.
    import sys
    import time

    import torch
    from torch import nn

    leak, seconds = sys.argv[1] == "leak", float(sys.argv[2])
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(64, 512), torch.randint(0, 10, (64,))
    losses = []
    end = time.time() + seconds
    while time.time() < end:
        loss = nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        val_loss = nn.functional.cross_entropy(net(torch.randn(64, 512)), y)
        losses.append(val_loss if leak else val_loss.item())
        time.sleep(0.05)
    print("steps", len(losses))
    """)


@pytest.mark.proc
@pytest.mark.slow
def test_a_script_keeping_every_loss_alive_is_flagged_while_it_runs_and_a_healthy_one_is_not(
    runs_dir, tmp_path
):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    env = {"OMP_NUM_THREADS": "1"}

    def launch(*args: str) -> str:
        c = script_run(str(path), args=args, stall_after=600.0, extra_env=env)
        return launcher.launch(c, runs_dir)

    leaky, healthy = launch("leak", "150"), launch("ok", "45")
    try:

        def creeping():
            rec = registry.get_run(leaky, runs_dir)
            f = next((f for f in rec.health if f["key"] == "memory_creep"), None)
            return (f, rec.state) if f else None

        f, st = wait_for(creeping, 140, "memory_creep on the leaking script")
        assert st == "running"  # found while it runs
        ev = f["evidence"]
        assert ev["series"] == "sys/rss_mib" and ev["slope_mib_per_min"] > creep.MIN_SLOPE_MIB_MIN
        assert ".item()" in f["fix"]
        assert launcher.stop(leaky, runs_dir, grace_s=2) == "stopped"
        wait_for(lambda: state(healthy, runs_dir) in FINAL, 120, "the healthy script to end")
        rec = registry.get_run(healthy, runs_dir)
        assert rec.state == "succeeded", rec
        assert "memory_creep" not in {h["key"] for h in rec.health}, rec.health
        # it was watched long enough to be judged: samples well past the warm-up and window
        sys_dir = runs_dir / healthy / "sys"
        reader = LogdirReader(str(sys_dir))
        reader.refresh()
        rss = next(
            s
            for n in reader.run_names()
            for t, s in reader.scalars(n).items()
            if t == "sys/rss_mib"
        )
        assert len(rss) >= 30
    finally:
        for run_id in (leaky, healthy):
            if state(run_id, runs_dir) not in FINAL:
                launcher.stop(run_id, runs_dir, grace_s=1)
        for run_id in (leaky, healthy):
            wait_for(lambda r=run_id: alive_of(runs_dir / r) == [], 20, "no process left")


def test_the_trainers_allocated_series_decides_not_nvml_device_memory(tmp_path):
    """NVML's device-wide used memory rises (allocator reserve, NCCL buffers, other tenants) while
    the trainer's allocated memory stays flat: no creep; the reverse is creep, named as such."""
    from types import SimpleNamespace

    w = HealthWatch(tmp_path, {"kind": "trainer"}, lambda **kw: None)
    rising, flat = series(lambda t: warm(t) + 2.0 * t), series(warm)
    w.memory.samples = {"sys/gpu0/mem_used_mib": rising}

    def scalars(pts):
        return SimpleNamespace(
            step=list(range(len(pts))), wall_time=[p[0] for p in pts], value=[p[1] for p in pts]
        )

    w._scalars = {
        "mem/cuda0/allocated_mib": scalars(flat),
        "mem/cuda0/reserved_mib": scalars(rising),
    }
    assert list(w.memory.series(w._scalars)) == ["mem/cuda0/allocated_mib"]
    obs = rules.Observation(now=0.0, started=0.0, alive=True, last_activity=0.0)
    found = rules.findings(
        rules.Observation(**{**obs.__dict__, "memory": w.memory.series(w._scalars)})
    )
    assert "memory_creep" not in {f.key for f in found}
    w._scalars = {"mem/cuda0/allocated_mib": scalars(rising)}
    f = next(
        f
        for f in rules.findings(
            rules.Observation(**{**obs.__dict__, "memory": w.memory.series(w._scalars)})
        )
        if f.key == "memory_creep"
    )
    assert f.evidence["series"] == "mem/cuda0/allocated_mib" and "allocated" in f.message


def test_other_tenants_memory_is_taken_off_the_gpu_series(tmp_path):
    w = HealthWatch(tmp_path, {"kind": "script"}, lambda **kw: None)
    w.memory.note({"sys/gpu0/mem_used_mib": 9000.0, "sys/gpu0/other_mem_mib": 8000.0})
    assert w.memory.series(w._scalars)["sys/gpu0/mem_used_mib"][-1][1] == 1000.0
    # NVML's per-process memory of the run's own processes, where it has it, decides
    w.memory.note({"sys/gpu0/mem_used_mib": 9000.0, "sys/gpu0/run_mem_mib": 700.0})
    assert w.memory.series(w._scalars)["sys/gpu0/mem_used_mib"][-1][1] == 700.0
