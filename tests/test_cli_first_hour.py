"""A newcomer's command line (issue 36): every mistake one line naming the fix, sweeps found by
their ids, the models listed, a closed pipe quiet. In-process (``lab.cli.main``), on a copy of the
shipped sample runs; the system Python and the installed command are in test_cli_installed.py."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from lab.cli import main

REPO = Path(__file__).resolve().parent.parent
SWEEP = "sweep-20261129-151558-b9c9"
PROC = pytest.mark.proc


@pytest.fixture
def samples(runs_dir: Path) -> Path:
    shutil.copytree(REPO / "sample_data/runs", runs_dir, dirs_exist_ok=True)
    return runs_dir


def one_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.out == ""
    line = out.err.strip()
    assert line.startswith("error: ") and "\n" not in line and "usage:" not in line
    return line


@pytest.mark.parametrize(
    "argv, fix",
    [
        ([], "give a command, e.g. `python -m lab status`"),
        (["launch", "--modes", "single,ddp"], "sweep --modes single,ddp"),
        (["sweep", "--mode", "ddp"], "sweep takes --modes, a comma list"),
        (["status", "--bogus"], "(see python -m lab status --help)"),
        (["launch", "--mode", "fsdpx"], "invalid choice: 'fsdpx'"),
        # torchvision's first import runs ldconfig (ctypes.util.find_library): a process
        pytest.param(["launch", "--model", "ResNet18"], "did you mean resnet18?", marks=PROC),
        pytest.param(["models", "resnt18"], "did you mean resnet18", marks=PROC),
        (["status", "sweep-20990101-000000-0000"], "no sweep"),
        (["launch", "--script", "nothere.py", "--dry-run"], "or --module package.module"),
    ],
)
def test_each_mistake_is_one_line_naming_the_fix(runs_dir, capsys, argv, fix):
    assert fix in one_error(capsys, argv)


def test_modes_are_case_insensitive(runs_dir, capsys):
    assert main(["launch", "--mode", "DDP", "--dry-run"]) == 0
    assert "torchrun" in capsys.readouterr().out


def test_sweep_dry_run_shows_every_run_in_order_and_starts_nothing(runs_dir, capsys):
    assert (
        main(["sweep", "--dry-run", "--modes", "single,DDP", "--vary", "seed=1,2", "--json"]) == 0
    )
    plan = json.loads(capsys.readouterr().out)["runs"]
    assert [(r["order"], r["mode"], r["varied"]) for r in plan] == [
        (1, "single", {"seed": 1}),
        (2, "single", {"seed": 2}),
        (3, "ddp", {"seed": 1}),
        (4, "ddp", {"seed": 2}),
    ]
    assert all("--seed" in r["argv"] for r in plan)
    assert list(runs_dir.iterdir()) == []  # nothing made, nothing started


def test_status_groups_a_sweep_under_its_id_in_its_order(samples, capsys):
    assert main(["status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines.index(next(x for x in lines if x.startswith(SWEEP)))
    order = json.loads((samples / ".sweeps" / f"{SWEEP}.json").read_text())["run_ids"]
    shown = [x.split()[0] for x in lines[header + 1 : header + 1 + len(order)]]
    assert shown == order and lines[header] == f"{SWEEP} ({len(order)} runs)"
    # the state column lines up under every id of the folder
    states = {x.index(" succeeded") for x in lines if " succeeded" in x}
    assert len(states) == 1


def test_status_and_rm_and_compare_take_a_sweep_id(samples, capsys):
    order = json.loads((samples / ".sweeps" / f"{SWEEP}.json").read_text())["run_ids"]
    assert main(["status", SWEEP, "--json"]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)["runs"]] == order
    assert main(["rm", order[0]]) == 0
    capsys.readouterr()
    assert main(["compare", SWEEP, "--json"]) == 0
    out = capsys.readouterr()
    assert f"1 of its runs removed, compared without them: {order[0]}" in out.err
    assert order[0] not in out.out and order[1] in out.out
    assert main(["rm", SWEEP]) == 0
    assert capsys.readouterr().out.strip() == f"removed {SWEEP} and its {len(order) - 1} runs"
    assert not any((samples / rid).exists() for rid in order)
    assert not (samples / ".sweeps" / f"{SWEEP}.json").exists()


def test_rm_of_a_sweep_with_a_live_run_removes_nothing(samples, capsys):
    order = json.loads((samples / ".sweeps" / f"{SWEEP}.json").read_text())["run_ids"]
    status = samples / order[-1] / "status.json"
    # running, watched by a live supervisor: this test's own process stands for both
    me = {"pid": os.getpid(), "supervisor_pid": os.getpid(), "supervisor_ct": None, "pid_ct": None}
    live = json.loads(status.read_text()) | {"state": "running"} | me
    status.write_text(json.dumps(live))
    assert "stop it first" in one_error(capsys, ["rm", SWEEP])
    assert all((samples / rid).is_dir() for rid in order)


@pytest.mark.proc  # torchvision's first import runs ldconfig
def test_models_lists_tinycnn_first_and_checks_a_name(runs_dir, capsys):
    assert main(["models", "--json"]) == 0
    names = json.loads(capsys.readouterr().out)
    assert names[0] == "tinycnn" and "resnet18" in names and len(names) > 50
    assert main(["models", "vit_b_16"]) == 0
    assert (
        capsys.readouterr().out.strip()
        == "vit_b_16: takes images of exactly 224x224 (--image-size)"
    )


def test_an_empty_runs_folder_says_where_it_looked(runs_dir, capsys):
    assert main(["status"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"no runs in {runs_dir} (LAB_RUNS_DIR names another folder)"
    )


def test_a_run_is_named_by_its_name_where_that_is_unique(samples, capsys):
    rid = "20261129-151558-ddp-sample-ddp-r1-afde"
    assert main(["status", "sample-ddp-r1"]) == 0
    assert capsys.readouterr().out.startswith(rid)
    twin = samples / "20261129-151558-ddp-sample-ddp-r2-7879" / "run.json"
    twin.write_text(json.dumps(json.loads(twin.read_text()) | {"name": "sample-ddp-r1"}))
    line = one_error(capsys, ["logs", "sample-ddp-r1"])
    assert "2 runs are named 'sample-ddp-r1': give one run id" in line and rid in line


def test_the_cli_compare_says_what_the_page_says(samples, capsys):
    assert main(["compare", SWEEP, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_name = {r["name"]: r for r in doc["runs"]}
    ddp = by_name["sample-ddp-r1"]
    assert ddp["loss_agreement_step"] > 0 and ddp["utilisation"]["on_cpu"] is True
    assert 0 < ddp["utilisation"]["overall_pct"] <= 100
    b = ddp["step_breakdown_ms"]
    assert b["backward"] > 0 and b["comm_exposed"] > 0  # a profiled DDP run waits on gloo
    assert main(["compare", SWEEP]) == 0
    text = capsys.readouterr().out
    assert f"sample-ddp-r1: loss agrees to step {ddp['loss_agreement_step']}; CPU share" in text


@pytest.mark.parametrize("command", ["launch", "sweep"])
def test_every_flag_of_launch_and_sweep_has_a_meaning_and_its_default(command):
    from lab.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "cmd").choices[command]
    for action in sub._actions:
        if not action.option_strings or action.dest == "help":
            continue
        words = action.help or ""
        flag = action.option_strings[0]
        assert len(words.split()) >= 3, f"{command} {flag}: {words!r} says too little"
        default = action.default
        if default not in (None, False, [], (), "") and not isinstance(default, bool):
            assert "default" in words or "off" in words, (
                f"{command} {flag}: no default in {words!r}"
            )
