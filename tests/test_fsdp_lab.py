"""FSDP as the lab's fourth mode (issue 34), without a process: the mode's facts, its knobs and
their refusals, the sweep's plans, the pre-flight's words and memory estimate, and Compare's
memory-against-throughput trade. The runs themselves: tests/test_train_fsdp.py (the trainer) and
tests/test_fsdp_runs.py (the lab launching it)."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from lab.cli import main as lab_main
from lab.engine.launch import commands, knobs
from lab.engine.preflight import checks, describe, disk, estimate
from lab.engine.spec import modes
from lab.engine.spec.run import ConfigError, RunConfig
from lab.engine.sweep import vary
from lab.engine.sweep.plan import compare_modes_configs, device_count_configs
from lab.views.compare import headline, memory, table
from lab.views.compare.comparison import compare
from tests.helpers.compare_runs import load_runs, make_run
from training import memory as trainer_memory


def test_the_modes_facts_say_which_run_under_torchrun_and_which_shard():
    assert modes.MODES == ("single", "dp", "ddp", "fsdp")
    assert [m for m in modes.MODES if modes.torchrun(m)] == ["ddp", "fsdp"]
    assert [m for m in modes.MODES if modes.sharded(m)] == ["fsdp"]
    assert not modes.torchrun(None) and not modes.torchrun("zero3")
    c = RunConfig(mode="fsdp", nproc=2)
    assert (c.processes, c.world_size) == (2, 2)


def test_an_fsdp_run_is_started_by_torchrun_with_its_own_flags_only_when_set(tmp_path):
    c = RunConfig(mode="fsdp", nproc=2, reshard_after_forward="off", compile="on")
    argv, _ = commands.local_command(c, tmp_path, 29555, {})
    assert argv[1:3] == ["-m", "torch.distributed.run"] and "--nproc-per-node" in argv
    tail = argv[argv.index("training.train") :]
    assert tail[tail.index("--mode") + 1] == "fsdp"
    assert tail[tail.index("--reshard-after-forward") + 1] == "off"
    assert tail[tail.index("--compile") + 1] == "on"
    # the defaults are the trainer's: not passed, so a ddp run never carries an fsdp flag
    plain = commands.local_command(RunConfig(mode="ddp", nproc=2), tmp_path, 29555, {})[0]
    assert not {"--reshard-after-forward", "--compile", "--fsdp-cpu-offload"} & set(plain)


def test_each_modes_options_are_refused_in_the_others_in_one_line():
    assert [f for f, _ in knobs.knob_problems(RunConfig(mode="fsdp", nproc=2))] == []
    found = knobs.knob_problems(RunConfig(mode="ddp", nproc=2, reshard_after_forward="off"))
    assert found == [
        (
            "reshard_after_forward",
            "an option of FSDP (sharded), and mode ddp has none: use mode fsdp or leave it out",
        )
    ]
    found = knobs.knob_problems(RunConfig(mode="fsdp", nproc=2, static_graph=True))
    assert [f for f, _ in found] == ["static_graph"] and "use mode ddp" in found[0][1]
    # compile works in every mode but DataParallel over GPUs (the trainer refuses it too)
    dp = knobs.knob_problems(RunConfig(mode="dp", gpus=(0, 1), compile="on"))
    assert [f for f, _ in dp] == ["compile"] and "use mode ddp" in dp[0][1]
    assert knobs.knob_problems(RunConfig(mode="dp", compile="on")) == []  # one device: single
    # accumulation under fsdp divides each rank's share, as under ddp
    bad = knobs.knob_problems(RunConfig(mode="fsdp", nproc=2, batch_size=64, accum_steps=3))
    assert bad and "per rank (64 over 2)" in bad[0][1]


def test_a_sweep_varies_fsdps_options_in_its_fsdp_runs_only():
    axes = vary.parse(["reshard-after-forward=on,off", "compile=off,on"])
    base = [RunConfig(mode="ddp", nproc=2, name="d"), RunConfig(mode="fsdp", nproc=2, name="f")]
    runs = vary.crossed(base, axes)
    got = [(c.mode, c.reshard_after_forward, c.compile) for c in runs]
    assert got == [
        ("ddp", "on", "off"),
        ("ddp", "on", "on"),
        ("fsdp", "on", "off"),
        ("fsdp", "on", "on"),
        ("fsdp", "off", "off"),
        ("fsdp", "off", "on"),
    ]  # compile applies to every mode; resharding to fsdp's runs only
    with pytest.raises(ConfigError, match="no fsdp run: add fsdp to --modes"):
        vary.crossed(base[:1], vary.parse(["reshard-after-forward=on,off"]))
    with pytest.raises(ConfigError, match="use values of off, on"):
        vary.parse(["compile=maybe"])


def test_the_device_count_sweep_has_an_fsdp_curve_and_compare_modes_takes_it_when_asked():
    configs = device_count_configs(RunConfig(), (), ["single", "ddp", "fsdp"], [1, 2])
    assert [(c.mode, c.nproc, c.name) for c in configs] == [
        ("single", 1, "cmp-tinycnn-singlex1"),
        ("ddp", 1, "cmp-tinycnn-ddpx1"),
        ("ddp", 2, "cmp-tinycnn-ddpx2"),
        ("fsdp", 1, "cmp-tinycnn-fsdpx1"),
        ("fsdp", 2, "cmp-tinycnn-fsdpx2"),
    ]
    assert [c.mode for c in compare_modes_configs(RunConfig(), ())] == ["single", "dp", "ddp"]
    four = compare_modes_configs(RunConfig(), (0, 1), modes=modes.MODES)
    assert [(c.mode, c.gpus, c.nproc) for c in four] == [
        ("single", (0,), 1),
        ("dp", (0, 1), 1),
        ("ddp", (0, 1), 2),
        ("fsdp", (0, 1), 2),
    ]


def test_sweep_dry_run_plans_single_ddp_and_fsdp_at_each_count(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("LAB_RUNS_DIR", str(tmp_path))
    argv = ["sweep", "--modes", "single,ddp,fsdp", "--devices", "1,2", "--max-steps", "4"]
    assert lab_main(argv + ["--dry-run", "--vary", "reshard-after-forward=on,off"]) == 0
    out = capsys.readouterr().out
    plan = [line for line in out.splitlines() if line.startswith("# ") and ". " in line[:6]]
    assert [p.split(". ", 1)[1] for p in plan] == [
        "single",
        "ddp",
        "ddp",
        "fsdp reshard-after-forward=on",
        "fsdp reshard-after-forward=off",
        "fsdp reshard-after-forward=on",
        "fsdp reshard-after-forward=off",
    ]
    assert "FSDP: each rank keeps 1/2 of the parameters" in out
    assert not list(tmp_path.iterdir())  # a dry run starts and writes nothing


def test_the_preflight_says_what_fsdp_shards_and_what_it_gathers():
    lines = describe.lines(RunConfig(mode="fsdp", nproc=2), SimpleNamespace(gpus=()))
    assert lines[1].startswith("FSDP: 2 processes (2 per node x 1 node, on the CPU)")
    assert "all-gathered before its forward and again before its backward" in lines[2]
    off = describe.lines(RunConfig(mode="fsdp", nproc=2, reshard_after_forward="off"), None)
    assert "before its forward, its gradients reduce-scattered" in off[2]


def test_the_estimate_shards_parameters_gradients_and_optimizer_and_adds_the_gathered_block():
    args = ("resnet18", 3, 10, 32, 32)  # model, channels, classes, batch per device, image size
    ddp = trainer_memory.estimate_bytes("ddp", 2, args[3], args[0], *args[1:3], args[4])[0]
    on = trainer_memory.estimate_bytes("fsdp", 2, args[3], args[0], *args[1:3], args[4], shards=2)[
        0
    ]
    off = trainer_memory.estimate_bytes(
        "fsdp", 2, args[3], args[0], *args[1:3], args[4], shards=2, reshard_after_forward=False
    )[0]
    for part in ("parameters", "gradients", "optimizer"):
        assert on[part] == -(-ddp[part] // 2)
    assert on["activations"] == ddp["activations"]
    # resnet18's largest block (layer4's BasicBlock, 4.7 M of 11.7 M parameters) plus the root
    params = ddp["parameters"]
    assert 0.35 * params < on["gathered"] < 0.6 * params
    assert off["gathered"] == params  # every block kept gathered until its backward
    assert sum(on.values()) < sum(ddp.values())  # the trade the chart shows
    one = trainer_memory.estimate_bytes("fsdp", 1, 32, "resnet18", 3, 10, 32, shards=1)[0]
    assert one["gathered"] == 0 and one["parameters"] == params  # one rank shards nothing


def test_a_run_too_big_for_its_gpus_is_refused_naming_fsdp_when_sharded_it_fits():
    c = RunConfig(mode="ddp", gpus=(0, 1), nproc=2, model="resnet18")
    need = estimate.per_gpu(c)[0].total_mib
    sharded = estimate.per_gpu(dataclasses.replace(c, mode="fsdp"))[0].total_mib
    assert sharded < need
    free = (need + sharded) / 2  # too little for ddp, enough for fsdp (a fake GPU: none here)
    facts = checks.MachineFacts(free_mib={0: free, 1: free}, need_mib={0: need, 1: need})
    facts = dataclasses.replace(facts, fsdp_mib={0: sharded, 1: sharded})
    (first, _) = checks.refusals(c, facts)
    assert "or use mode fsdp on the same GPUs, which needs about" in first.message
    tight = dataclasses.replace(facts, fsdp_mib={0: free + 1, 1: free + 1})
    assert "fsdp" not in checks.refusals(c, tight)[0].message  # no suggestion that would not fit


def _run(mode: str, devices: int, speed: float, peak: float | None, estimate_mib: float):
    names = [f"cpu{i}" for i in range(devices)]
    mem = {"estimate_mib": {n: {"total": estimate_mib} for n in names}}
    if peak is not None:
        mem |= {"peak_mib": {n: peak for n in names}, "baseline_mib": {n: 0 for n in names}}
    summary = {"mode": mode, "world_size": devices, "throughput": {"median": speed}}
    return SimpleNamespace(summary=summary | {"memory": mem})


def test_the_trade_is_one_point_per_mode_and_count_and_one_sentence_per_fsdp_point():
    runs = [
        _run("ddp", 2, 1000.0, 100.0, 90.0),
        _run("ddp", 2, 1200.0, 120.0, 90.0),
        _run("fsdp", 2, 900.0, 44.0, 40.0),
        _run("single", 1, 800.0, 80.0, 70.0),
        _run("fsdp", 4, 500.0, None, 20.0),  # nothing measured: its estimate, said so
    ]
    points = memory.frontier(runs)
    assert [(p.mode, p.devices, p.runs, p.measured) for p in points] == [
        ("single", 1, 1, True),
        ("ddp", 2, 2, True),
        ("fsdp", 2, 1, True),
        ("fsdp", 4, 1, False),
    ]
    ddp = points[1]
    assert (ddp.throughput, ddp.memory_mib) == (1100.0, 110.0)  # medians over the two runs
    assert memory.trade(points) == [
        "fsdp on 2 uses 40% of DDP's memory per device at 0.82x its speed."
    ]
    fig, caption = memory.frontier_view(runs)
    assert caption.startswith("fsdp on 2 uses 40%") and len(fig.data) == 4
    assert fig.data[3].marker.symbol == "circle-open"  # the estimate is drawn hollow
    assert memory.frontier_view(runs[:2]) is None  # one point is no trade


def test_an_fsdp_cards_reason_names_its_exposed_all_gather_and_reduce_scatter():
    phases = {
        "comm_all_gather_fwd_exposed": 10.26,
        "comm_all_gather_bwd_exposed": 6.52,
        "comm_reduce_scatter_exposed": 11.59,
        "comm_total": 28.38,
        "comm_exposed": 28.38,
    }  # run A of tests/data/fsdp_gloo_cpu: every collective waited for under gloo
    profile = {"step_ms": 48.2, "effective_mode": "fsdp", "phases_ms": phases}
    figures = SimpleNamespace(mode="fsdp", effective_mode="fsdp", device_count=2, profile=profile)
    assert headline.reason(SimpleNamespace(figures=figures)) == (
        "FSDP waits 16.8 ms on all-gather and 11.6 ms on reduce-scatter of its 48.2 ms step"
    )


def test_the_disk_estimate_counts_fsdps_sharded_checkpoint_beside_the_gathered_one():
    ddp_bytes, ddp_text = disk.need(RunConfig(mode="ddp", nproc=2, model="resnet18"))
    fsdp_bytes, fsdp_text = disk.need(RunConfig(mode="fsdp", nproc=2, model="resnet18"))
    assert ddp_text.startswith("2 checkpoints") and fsdp_text.startswith("4 checkpoints")
    assert fsdp_bytes > 1.9 * ddp_bytes  # the events are the same few KB


def test_the_preflight_of_a_gpu_run_gives_its_memory_under_fsdp_beside_its_own():
    c = RunConfig(mode="ddp", gpus=(0, 1), nproc=2, model="resnet18")
    need, sharded = estimate.per_gpu(c)[0], estimate.per_gpu(dataclasses.replace(c, mode="fsdp"))
    facts = checks.MachineFacts(
        free_mib={0: 1e6, 1: 1e6},
        need_mib={0: need.total_mib, 1: need.total_mib},
        fsdp_mib={g: e.total_mib for g, e in sharded.items()},
    )
    lines = checks.preflight(c, SimpleNamespace(gpus=()), facts)
    said = f"Memory under fsdp on the same GPUs: about {estimate.mib_text(sharded[0].total_mib)}"
    assert any(line.startswith(said) for line in lines)
    assert not any(line.startswith("Refused") for line in lines)


def test_compares_table_shows_the_compile_time_apart_only_when_a_run_compiled(tmp_path):
    make_run(tmp_path, "eager", throughput=1000.0)
    compiled = make_run(tmp_path, "compiled", throughput=1200.0)
    s = json.loads((compiled / "summary.json").read_text())
    (compiled / "summary.json").write_text(json.dumps(s | {"compile_s": 21.9, "compile_steps": 1}))
    runs = load_runs(tmp_path)
    both = table.frame(compare(runs, scalars={r.key: {} for r in runs}))
    assert dict(zip(both["run"], both[table.COMPILE].isna())) == {"eager": True, "compiled": False}
    assert both[table.COMPILE].max() == 21.9
    alone = [r for r in runs if r.run_id == "eager"]
    assert table.COMPILE not in table.frame(compare(alone, scalars={alone[0].key: {}})).columns
