"""Sweeps over knobs (``sweep --vary NAME=V1,V2``): the values parsed as the option's flag would be,
crossed with modes and repeats (DDP's options on the ddp runs only), recorded as run.json's
``varied``; Compare groups the runs by value (``by_value``: the speedup against the first value with
its interval) and does not warn about what was varied. The end-to-end test runs real processes
(torchrun, gloo) and reads the profiler's all-reduce counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.engine.launch import launcher
from lab.engine.spec.run import ConfigError, RunConfig
from lab.engine.sweep import vary
from lab.engine.sweep.plan import interleaved
from lab.views.compare.comparison import compare
from tests.helpers.cli import run_lab
from tests.helpers.compare_runs import load_runs, spread_run
from tests.helpers.sweep_vary import _varied_run

REPO = Path(__file__).resolve().parents[1]
TINY = ["--max-steps", "6", "--image-size", "16", "--batch-size", "32", "--log-every", "1"]
TINY += ["--checkpoint", "none", "--epochs", "1"]


def test_values_are_read_as_the_flag_reads_them():
    axes = vary.parse(["bucket-cap-mb=1,25", "accum-steps=1,4", "channels-last=off,on"])
    assert axes == [
        ("bucket-cap-mb", (1.0, 25.0)),
        ("accum-steps", (1, 4)),
        ("channels-last", (False, True)),
    ]
    assert [type(v) for v in axes[1][1]] == [int, int]  # RunConfig's default's type
    assert vary.parse(["precision=fp32,bf16"]) == [("precision", ("fp32", "bf16"))]


@pytest.mark.parametrize(
    "texts, words",
    [
        (["bucket-size=1,25"], "no option a sweep can vary: use NAME=V1,V2 with NAME one of"),
        (["mode=single,ddp"], "no option a sweep can vary"),  # --modes says that
        (["bucket-cap-mb=one,25"], "must be a float, e.g. --vary bucket-cap-mb=1,25,100"),
        (["accum-steps=1.5,2"], "must be a int"),
        (["precision=fp32,fp64"], "use values of fp32, fp16, bf16"),
        (["channels-last=maybe,on"], "must be on or off"),
        (["accum-steps=4"], "give two values or more"),
        (["seed=1,2", "seed=3,4"], "varied twice"),
    ],
)
def test_a_bad_vary_is_one_error_naming_the_fix(texts, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(".", r"\.")) as e:
        vary.parse(texts)
    assert e.value.field == "vary" and "\n" not in str(e.value)


def test_values_cross_modes_and_repeats_and_ddps_options_vary_ddp_runs_only():
    axes = vary.parse(["bucket-cap-mb=1,25"])
    base = [RunConfig(mode="single", name="cmp-single"), RunConfig(mode="ddp", nproc=2, name="d")]
    runs = interleaved(vary.crossed(base, axes), 2)
    assert [(c.mode, c.bucket_cap_mb, c.name) for c in runs] == [
        ("single", 0.0, "cmp-single-r1"),
        ("ddp", 1.0, "d-bucket-cap-mb1-r1"),
        ("ddp", 25.0, "d-bucket-cap-mb25-r1"),
        ("single", 0.0, "cmp-single-r2"),
        ("ddp", 1.0, "d-bucket-cap-mb1-r2"),
        ("ddp", 25.0, "d-bucket-cap-mb25-r2"),
    ]  # each value's runs take turns, as repeats do
    assert [vary.varied(c, axes) for c in runs[:3]] == [
        {},
        {"bucket-cap-mb": 1.0},
        {"bucket-cap-mb": 25.0},
    ]
    assert vary.varied(runs[0], []) is None  # no knob sweep: run.json has no varied
    with pytest.raises(ConfigError, match="no ddp run: add ddp to --modes"):
        vary.crossed(base[:1], axes)


def test_two_options_cross_and_long_names_keep_their_values():
    axes = vary.parse(["bucket-cap-mb=0.001,25", "accum-steps=1,4"])
    got = vary.crossed([RunConfig(mode="ddp", nproc=2, name="cmp-tinycnn-ddpx2")], axes)
    assert [(c.bucket_cap_mb, c.accum_steps) for c in got] == [
        (0.001, 1),
        (0.001, 4),
        (25.0, 1),
        (25.0, 4),
    ]
    assert [c.name for c in got][:2] == [
        "cmp-tinycnn-ddpx2-bcm0.001-as1",
        "cmp-tinycnn-ddpx2-bcm0.001-as4",
    ]  # initials where the flags do not fit a name
    assert all(len(c.name) <= vary.NAME_ROOM for c in got)


def test_compare_groups_runs_by_value_against_the_first_value(tmp_path):
    root = tmp_path / "runs"
    at = "2026-11-29T07:0{}:00+00:00"
    for i, (v, median) in enumerate([(1.0, 1000), (25.0, 1500), (1.0, 1010), (25.0, 1490)]):
        _varied_run(
            root, f"r{i}-b{v:g}", median, {"bucket-cap-mb": v}, mode="ddp",
            devices=("cpu:0", "cpu:1"), created_at=at.format(i),
            seed=i if v == 1.0 else 7,  # a seed sweep's warning would be exempt only if varied
        )  # fmt: skip
    c = compare(load_runs(root))
    by = c.by_value["bucket-cap-mb"]
    assert [(g["value"], g["runs"]) for g in by] == [
        (1.0, ["r0-b1", "r2-b1"]),
        (25.0, ["r1-b25", "r3-b25"]),
    ]
    assert {g["with"] for g in by} == {"ddp x2"}
    assert by[0]["throughput"]["median"] == pytest.approx(1005)
    assert by[1]["speedup"]["value"] == pytest.approx(1495 / 1005)
    assert by[1]["speedup"]["ci_low"] <= by[1]["speedup"]["value"] <= by[1]["speedup"]["ci_high"]
    # 2 runs against 2: the pairs' range covers 67%, too little for a verdict (verdict.LEVEL)
    assert (by[0]["verdict"], by[1]["verdict"]) == ("baseline", "within noise")
    assert {g["mode"] for g in c.by_mode} == {"ddp bucket-cap-mb=1", "ddp bucket-cap-mb=25"}
    assert [w.key for w in c.warnings] == ["seed"]  # not varied: still warned


def test_a_varied_option_is_no_fairness_warning(tmp_path):
    root, batches = tmp_path / "runs", tmp_path / "batches"
    for i in range(2):
        _varied_run(root, f"r{i}", 1000 + i, {"seed": i}, seed=i)
        _varied_run(batches, f"r{i}", 1000 + i, {"batch-size": 32 * i + 32}, batch=32 * i + 32)
    assert compare(load_runs(root)).warnings == ()
    # the batch is no unfairness; the efficiency a different batch leaves empty is still said
    assert [w.key for w in compare(load_runs(batches)).warnings] == ["scaling"]
    unvaried = tmp_path / "plain"
    for i, batch in enumerate([32, 64]):
        spread_run(unvaried, f"r{i}", 1000 + i, 950, 1050, batch=batch)
    assert "global_batch" in [w.key for w in compare(load_runs(unvaried)).warnings]


def test_a_scripts_own_flags_are_varied_in_its_arguments():
    from lab.engine.spec.run import script_run

    axes = vary.parse(["--lr=0.1,0.01, 0.1", "batch-size=16,32"], script=True)
    assert axes == [("lr", ("0.1", "0.01")), ("batch-size", ("16", "32"))]  # text, as given
    base = script_run("train.py", args=("--lr=0.5", "--epochs", "1"), mode="single")
    ddp = script_run("train.py", args=("--lr", "0.5"), mode="ddp", nproc=2)
    runs, varied = vary.sweep_runs([base, ddp], axes[:1], repeats=1)
    assert [(r.mode, r.args) for r in runs] == [
        ("single", ("--lr=0.1", "--epochs", "1")),  # replaced where the script's args had it
        ("single", ("--lr=0.01", "--epochs", "1")),
        ("ddp", ("--lr", "0.1")),
        ("ddp", ("--lr", "0.01")),
    ]
    assert varied == [{"lr": "0.1"}, {"lr": "0.01"}] * 2
    assert [r.name for r in runs[:2]] == ["cmp-train-lr0.1", "cmp-train-lr0.01"]
    added = vary.crossed([script_run("t.py", args=("--epochs", "1"))], axes[1:])
    assert [r.args for r in added] == [
        ("--epochs", "1", "--batch-size", "16"),  # added at the end where it had none
        ("--epochs", "1", "--batch-size", "32"),
    ]


@pytest.mark.parametrize(
    "texts, words",
    [
        (["lr=0.1"], "give two values or more, e.g. --vary lr=A,B"),
        (["lr=0.1,0.1"], "give two values or more"),
        (["=1,2"], "no flag name: use NAME=V1,V2 with NAME a long flag of your script"),
        (["l r=1,2"], "no flag name"),
        (["lr=1,2", "lr=3,4"], "lr is varied twice"),
    ],
)
def test_a_bad_vary_of_a_script_is_one_error_naming_the_fix(texts, words):
    with pytest.raises(ConfigError, match=words.replace(".", r"\.").replace("?", r"\?")):
        vary.parse(texts, script=True)


@pytest.mark.proc
@pytest.mark.timeout(300)  # two short script runs one after another
def test_a_script_sweep_varies_its_own_flag_and_compare_reads_it_by_value(tmp_path):
    root, work = tmp_path / "runs", tmp_path / "work"  # its SummaryWriter() writes in work/
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
        "single",
        "--vary",
        "lr=0.2,0.02",
        "--json",
        "--env",
        "OMP_NUM_THREADS=1",
        "--",
        "--epochs",
        "1",
        "--max-steps",
        "6",
        "--log-every",
        "1",
        "--lr",
        "0.5",
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    for rid in doc["run_ids"]:
        assert launcher.wait(rid, root, timeout_s=240) == "succeeded"
    runs = [json.loads((root / r / "run.json").read_text()) for r in doc["run_ids"]]
    assert [(r["kind"], r["varied"], r["argv"][-2:]) for r in runs] == [
        ("script", {"lr": "0.2"}, ["--lr", "0.2"]),  # the given --lr 0.5 replaced
        ("script", {"lr": "0.02"}, ["--lr", "0.02"]),
    ]
    res = run_lab(root, "compare", doc["sweep_id"], "--json")
    assert res.returncode == 0, res.stderr
    by = json.loads(res.stdout)["by_value"]["lr"]
    assert [(g["value"], g["runs"]) for g in by] == [
        ("0.2", [doc["run_ids"][0]]),
        ("0.02", [doc["run_ids"][1]]),
    ]
    # one run against one: never faster or slower ("" where 6 steps give no interval)
    assert by[0]["verdict"] == "baseline" and by[1]["verdict"] in ("within noise", "")


@pytest.mark.proc
def test_a_bad_vary_on_the_command_line_is_one_line_and_starts_nothing(tmp_path):
    res = run_lab(tmp_path, "sweep", "--modes", "ddp", "--vary", "bucket-size=1,25")
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "bucket-cap-mb" in res.stderr and "Traceback" not in res.stderr
    res = run_lab(tmp_path, "sweep", "--modes", "single", "--vary", "bucket-cap-mb=1,25")
    assert res.returncode == 2 and "add ddp to --modes" in res.stderr, res.stderr
    assert not tmp_path.exists() or not list(tmp_path.iterdir())


def _allreduce_calls(run_dir: Path) -> float:
    doc = json.loads((run_dir / "profile" / "breakdown.json").read_text())
    rows = [c for c in doc["collectives"] if c["op"] == "all_reduce" and c["rank"] == 0]
    return rows[0]["calls"]


@pytest.mark.proc
@pytest.mark.timeout(900)  # four real DDP runs one after another on a shared machine
def test_a_bucket_size_sweep_runs_interleaved_and_compare_reads_it_by_value(tmp_path):
    # tinycnn's gradients are ~24 KB in all: 1 MB buckets would hold them in one bucket, as 25 MB
    # do, so the small end is 0.001 MB (1 KB), which splits them into one bucket per tensor or so
    res = run_lab(
        tmp_path,
        "sweep",
        "--modes",
        "ddp",
        "--nproc",
        "2",
        "--vary",
        "bucket-cap-mb=0.001,25",
        "--repeats",
        "2",
        "--profile-steps",
        "2:4",
        "--json",
        *TINY,
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    runs = []
    for rid in doc["run_ids"]:
        assert launcher.wait(rid, tmp_path, 240) == "succeeded", (
            tmp_path / rid / "stdout.log"
        ).read_text()
        runs.append(json.loads((tmp_path / rid / "run.json").read_text()))
    assert [r["varied"] for r in runs] == [{"bucket-cap-mb": v} for v in (0.001, 25.0) * 2]
    assert [r["config"]["bucket_cap_mb"] for r in runs] == [0.001, 25.0] * 2
    assert [r["name"] for r in runs] == [
        "cmp-tinycnn-ddpx2-bucket-cap-mb0.001-r1",
        "cmp-tinycnn-ddpx2-bucket-cap-mb25-r1",
        "cmp-tinycnn-ddpx2-bucket-cap-mb0.001-r2",
        "cmp-tinycnn-ddpx2-bucket-cap-mb25-r2",
    ]
    small, large = (_allreduce_calls(tmp_path / rid) for rid in doc["run_ids"][:2])
    assert small > large, (small, large)  # more buckets, more all-reduce calls per step
    res = run_lab(tmp_path, "compare", doc["sweep_id"], "--json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert [r["varied"] for r in got["runs"]] == [r["varied"] for r in runs]
    by = got["by_value"]["bucket-cap-mb"]
    assert [(g["value"], len(g["runs"]), g["with"]) for g in by] == [
        (0.001, 2, "ddp x2"),
        (25.0, 2, "ddp x2"),
    ]
    for g in by:
        t, sp = g["throughput"], g["speedup"]
        assert 0 < t["ci_low"] <= t["median"] <= t["ci_high"]
        assert sp["ci_low"] <= sp["value"] <= sp["ci_high"] and g["verdict"]
        assert g["step_ms"] > 0 and g["comm_exposed_ms"] is not None  # profiled: the anatomy
    assert by[0]["speedup"]["value"] == pytest.approx(1.0)
    # run names carry "bucket": only a busy machine (a shared one) may be said, no difference
    assert not [w for w in got["warnings"] if "Busy machine" not in w], got["warnings"]
    text = run_lab(tmp_path, "compare", doc["sweep_id"])
    assert "by value: bucket-cap-mb=25" in text.stdout, text.stdout


@pytest.mark.proc
def test_bf16_against_fp32_on_the_cpu_compares_memory_and_throughput_with_intervals(tmp_path):
    res = run_lab(
        tmp_path, "sweep", "--modes", "single", "--vary", "precision=fp32,bf16", "--json", *TINY
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    for rid in doc["run_ids"]:
        assert launcher.wait(rid, tmp_path, 240) == "succeeded", (
            tmp_path / rid / "stdout.log"
        ).read_text()
    summaries = [json.loads((tmp_path / r / "summary.json").read_text()) for r in doc["run_ids"]]
    assert [s["precision"] for s in summaries] == ["fp32", "bf16"]  # bf16 autocast on the CPU
    got = json.loads(run_lab(tmp_path, "compare", doc["sweep_id"], "--json").stdout)
    by = got["by_value"]["precision"]
    assert [g["value"] for g in by] == ["fp32", "bf16"]
    for g in by:
        t = g["throughput"]
        assert 0 < t["ci_low"] <= t["median"] <= t["ci_high"]
    sp = by[1]["speedup"]
    assert sp["ci_low"] <= sp["value"] <= sp["ci_high"] and by[1]["verdict"]
    for row in got["runs"]:  # each run's memory beside its throughput
        assert row["peak_mem_mib"] and all(v > 0 for v in row["peak_mem_mib"].values()), row
    # precision was the intended difference: no warning about it (a busy machine may be said)
    assert not [w for w in got["warnings"] if "Busy machine" not in w], got["warnings"]
