"""Device counts as a sweep axis: ``sweep --devices`` crosses modes x counts x repeats (single once
per repeat, DP honest about one device on the CPU), refuses counts beyond the machine in one line,
and reads ``--nproc N`` as DDP's processes. Real ``python -m lab`` subprocesses, real torchrun/gloo.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.engine.launch import launcher
from lab.engine.spec.run import ConfigError, RunConfig
from lab.engine.sweep.plan import device_count_configs, interleaved, slurm_count_configs
from tests.helpers.cli import run_lab

REPO = Path(__file__).resolve().parents[1]
TINY = ["--batch-size", "64", "--image-size", "16", "--epochs", "1", "--max-steps", "3"]
TINY += ["--log-every", "1", "--checkpoint", "none"]


def _shape(configs: list[RunConfig]) -> list[tuple[str, tuple[int, ...], int]]:
    return [(c.mode, c.gpus, c.nproc) for c in configs]


def test_counts_take_the_first_n_gpus_and_single_runs_once():
    got = device_count_configs(RunConfig(), (0, 1, 2, 3), ["single", "dp", "ddp"], [1, 2, 4])
    assert _shape(got) == [
        ("single", (0,), 1),
        ("dp", (0,), 1),
        ("dp", (0, 1), 1),
        ("dp", (0, 1, 2, 3), 1),
        ("ddp", (0,), 1),
        ("ddp", (0, 1), 2),
        ("ddp", (0, 1, 2, 3), 4),
    ]
    assert [c.world_size for c in got] == [1, 1, 2, 4, 1, 2, 4]


def test_on_the_cpu_a_count_is_ddp_processes_and_dp_runs_once():
    got = device_count_configs(RunConfig(), (), ["single", "dp", "ddp"], [1, 2], cpu_limit=2)
    assert _shape(got) == [("single", (), 1), ("dp", (), 1), ("ddp", (), 1), ("ddp", (), 2)]
    assert len(interleaved(got, 2)) == 8


@pytest.mark.parametrize(
    "gpus, counts, words",
    [((0, 1), [1, 8], "2 usable GPUs (0,1)"), ((), [4], "2 CPU cores"), ((0,), [0], "comma")],
)
def test_counts_beyond_the_machine_are_refused_naming_what_exists(gpus, counts, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        device_count_configs(RunConfig(), gpus, ["ddp"], counts, cpu_limit=2)


def test_on_slurm_a_count_is_gpus_per_node_then_whole_nodes():
    base = RunConfig(backend="slurm", gpus_per_node=4)
    got = slurm_count_configs(base, ["single", "ddp"], [1, 4, 8, 16])
    assert [(c.mode, c.nnodes, c.gpus_per_node, c.nproc) for c in got] == [
        ("single", 1, 1, 1),
        ("ddp", 1, 1, 1),
        ("ddp", 1, 4, 4),
        ("ddp", 2, 4, 4),
        ("ddp", 4, 4, 4),
    ]
    dp = slurm_count_configs(base, ["dp"], [2, 4])
    assert [(c.nnodes, c.gpus_per_node, c.world_size) for c in dp] == [(1, 2, 2), (1, 4, 4)]
    with pytest.raises(ConfigError, match="more than a node's 4 GPUs"):  # DP does not span nodes
        slurm_count_configs(base, ["dp"], [8])
    with pytest.raises(ConfigError, match="multiples of 4"):
        slurm_count_configs(base, ["ddp"], [6])
    cpu = slurm_count_configs(RunConfig(backend="slurm"), ["dp", "ddp"], [1, 2])
    assert [(c.mode, c.nnodes, c.gpus_per_node, c.nproc) for c in cpu] == [
        ("dp", 1, 0, 1),
        ("ddp", 1, 0, 1),
        ("ddp", 1, 0, 2),
    ]  # CPU nodes: DDP processes on one node; DP once, on one device


@pytest.mark.proc
def test_cli_refuses_a_count_beyond_the_machine_in_one_line(tmp_path):
    res = run_lab(tmp_path, "sweep", "--modes", "ddp", "--devices", "1,512")
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "512" in res.stderr and "CPU cores" in res.stderr and "Traceback" not in res.stderr
    assert not tmp_path.exists() or not list(tmp_path.iterdir())


def _finished(root: Path, run_ids: list[str]) -> list[dict]:
    for rid in run_ids:
        assert launcher.wait(rid, root, 240) == "succeeded", (root / rid / "stdout.log").read_text()
    return [json.loads((root / rid / "run.json").read_text()) for rid in run_ids]


@pytest.mark.proc
def test_nproc_in_a_sweep_is_ddps_processes_not_refused_for_single(tmp_path):
    """The plan, through the same checks a launch makes (``--dry-run``: nothing starts; the
    sweeps below run single and 2-process ddp for real)."""
    args = ("sweep", "--modes", "single,ddp", "--nproc", "2", "--dry-run", "--json", *TINY)
    res = run_lab(tmp_path, *args)
    assert res.returncode == 0, res.stderr
    runs = json.loads(res.stdout)["runs"]
    assert [r["mode"] for r in runs] == ["single", "ddp"]
    assert "torch.distributed.run" not in runs[0]["argv"]
    torchrun = runs[1]["argv"]
    assert torchrun[torchrun.index("--nproc-per-node") + 1] == "2"
    assert not any(tmp_path.iterdir())  # no run folder


@pytest.mark.proc
def test_a_device_count_sweeps_repeats_are_interleaved_single_once_each(tmp_path):
    """The plan of two repeats (``--dry-run``: the same list of runs a launch starts, nothing
    starts): each repeat runs single once, then ddp on 1 and 2 processes, before the next repeat."""
    args = ("sweep", "--modes", "single,ddp", "--devices", "1,2", "--repeats", "2")
    res = run_lab(tmp_path, *args, "--dry-run", "--json", *TINY)
    assert res.returncode == 0, res.stderr
    runs = json.loads(res.stdout)["runs"]
    asked = []
    for r in runs:
        argv = r["argv"]
        n = int(argv[argv.index("--nproc-per-node") + 1]) if "--nproc-per-node" in argv else 1
        asked.append((r["mode"], n))
    assert asked == [("single", 1), ("ddp", 1), ("ddp", 2)] * 2
    assert not any(tmp_path.iterdir())  # no run folder


@pytest.mark.proc
@pytest.mark.timeout(900)  # three real runs one after another on a shared machine
def test_a_device_count_sweep_interleaves_and_compare_draws_its_scaling_curve(tmp_path):
    """One repeat for real (the plan of two is the test above: three runs of six that import torch
    are saved), and Compare's scaling curve of it."""
    res = run_lab(tmp_path, "sweep", "--modes", "single,ddp", "--devices", "1,2", "--json", *TINY)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    runs = _finished(tmp_path, doc["run_ids"])
    asked = [(r["config"]["mode"], r["config"]["nproc"]) for r in runs]
    assert asked == [("single", 1), ("ddp", 1), ("ddp", 2)]  # single once
    res = run_lab(tmp_path, "compare", doc["sweep_id"], "--json")
    assert res.returncode == 0, res.stderr
    curve = json.loads(res.stdout)["scaling_curve"]
    assert [(c["mode"], c["devices"], len(c["runs"])) for c in curve] == [
        ("ddp", 1, 1),
        ("ddp", 2, 1),
        ("single", 1, 1),
    ]
    for c in curve:
        t = c["throughput"]
        assert 0 < t["ci_low"] <= t["median"] <= t["ci_high"]
        assert c["efficiency"]["value"] == pytest.approx(c["speedup"]["value"] / c["devices"])
    assert curve[2]["speedup"]["value"] == pytest.approx(1.0)
    # each count's repeats a group apart (ddp x1, ddp x2): test_noise.py, on run folders
    assert {c["rate"] for c in curve} == {"samples/s"}  # the trainer measures samples/s


@pytest.mark.proc
@pytest.mark.timeout(600)  # three real script runs one after another
def test_a_script_sweeps_every_mode_and_count_and_compare_draws_its_curve(tmp_path):
    root, work = tmp_path / "runs", tmp_path / "work"
    work.mkdir()
    script = str(REPO / "examples" / "ddp_digits.py")
    res = run_lab(
        root,
        "sweep",
        "--script",
        script,
        "--cwd",
        str(work),
        "--modes",
        "single,ddp",
        "--devices",
        "1,2",
        "--json",
        "--",
        "--epochs",
        "1",
        "--max-steps",
        "8",
        "--log-every",
        "1",
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    runs = _finished(root, doc["run_ids"])
    assert [(r["kind"], r["config"]["mode"], r["config"]["nproc"]) for r in runs] == [
        ("script", "single", 1),
        ("script", "ddp", 1),
        ("script", "ddp", 2),
    ]
    assert {r["sweep_id"] for r in runs} == {doc["sweep_id"]}
    assert runs[0]["argv"][1:] == [script, "--epochs", "1", "--max-steps", "8", "--log-every", "1"]
    assert "torch.distributed.run" in runs[2]["argv"]  # ddp under torchrun, two processes
    res = run_lab(root, "compare", doc["sweep_id"], "--json")
    assert res.returncode == 0, res.stderr
    curve = json.loads(res.stdout)["scaling_curve"]
    assert [(c["mode"], c["devices"], c["rate"]) for c in curve] == [
        ("ddp", 1, "steps/s"),
        ("ddp", 2, "steps/s"),
        ("single", 1, "steps/s"),
    ]  # a script logs no samples/s: its curve is of the loss tag's step rate, and says so
    assert all(c["throughput"]["median"] > 0 for c in curve)


@pytest.mark.proc
@pytest.mark.parametrize(
    "args, words",
    [
        (["--script", "x.py", "--scaling", "weak"], "strong scaling"),
        (["--", "--epochs", "1"], "give --script PATH"),
        (["--script", "x.py", "--lr", "0.5"], "put the script's own options after --"),
    ],
)
def test_a_script_sweep_asked_wrongly_is_one_line_and_starts_nothing(tmp_path, args, words):
    res = run_lab(tmp_path, "sweep", "--modes", "single,ddp", *args)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert words in res.stderr and "Traceback" not in res.stderr
    assert not tmp_path.exists() or not list(tmp_path.iterdir())
