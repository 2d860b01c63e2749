"""A user's script as a run, without running it: lab/engine/launch/script.py (checks, exact
commands), lab/engine/launch/script_form.py (form and command-line values, the preview),
lab/engine/supervise/linked.py (which folders of event files are the run's),
lab/cli/script_options.py (``launch --script`` refusals and help, as real ``python -m lab``
processes) and the argparse diagnosis of lab/engine/supervise/diagnose.py on a run folder written as
a refused script leaves it."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from lab.engine.launch import backends, commands, script, script_form
from lab.engine.spec.run import PLACEMENT, SCRIPT_ONLY, ConfigError, script_run
from lab.engine.supervise import linked
from lab.engine.supervise.diagnose import diagnose
from lab.events.reader import file_origin
from lab.runfolder import REPO_ROOT
from tests.helpers.cli import run_lab

RUN = Path("/runs/r1")
DDP_EXAMPLE = REPO_ROOT / "examples" / "ddp_digits.py"


def test_single_and_dp_commands_exactly():
    c = script_run("/w/train.py", args=("--epochs", "3", "a b; rm -rf ~"), cwd="/w")
    argv, env = backends.build_command(
        c, RUN, 0, base_env={"PATH": "/bin", "PYTHONPATH": "/mine"}, cores=8
    )
    # one item, never a shell
    assert argv == [sys.executable, "/w/train.py", "--epochs", "3", "a b; rm -rf ~"]
    assert env == {
        "PATH": "/bin",
        "CUDA_VISIBLE_DEVICES": "",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "OMP_NUM_THREADS": "8",
        "PYTHONUNBUFFERED": "1",
        "TORCHELASTIC_ERROR_FILE": "/runs/r1/error.json",
        "PYTHONPATH": "/mine",
        "LAB_RUN_DIR": "/runs/r1",
        "TENSORBOARD_LOGDIR": "/runs/r1/tb",
    }
    argv, env = backends.build_command(
        dataclasses.replace(c, mode="dp", gpus=(1, 3)), RUN, 0, base_env={}
    )
    assert argv[1] == "/w/train.py" and env["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert env["PYTHONPATH"] == ""  # the lab's own packages never shadow the user's modules


def test_ddp_and_module_commands_exactly():
    c = script_run(
        "-m pkg.train",
        args=("--lr", "0.1"),
        mode="ddp",
        nproc=2,
        cwd="/w",
        extra_env={"OMP_NUM_THREADS": "1"},
    )
    argv, env = backends.build_command(c, RUN, 41234, base_env={})
    assert argv == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--nnodes",
        "1",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        "41234",
        "--log-dir",
        "/runs/r1/logs",
        "--tee",
        "3",
        "-m",
        "pkg.train",
        "--lr",
        "0.1",
    ]
    assert env["OMP_NUM_THREADS"] == "1" and env["TORCHELASTIC_ERROR_FILE"] == "/runs/r1/error.json"
    two = dataclasses.replace(
        c, script="/w/t.py", nproc=1, nnodes=2, rdzv_endpoint="10.0.0.1:29400"
    )
    argv, _ = backends.build_command(two, RUN, 0, base_env={})
    assert "--rdzv-endpoint" in argv and argv[-3:] == ["/w/t.py", "--lr", "0.1"]
    other = commands.other_node_commands(two, RUN)
    assert (
        len(other) == 1
        and other[0][other[0].index("--node-rank") + 1] == "1"
        and other[0][-3] == "/w/t.py"
    )


def test_paths_are_made_absolute_and_the_folder_defaults_to_the_scripts(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    n = script.normalized(script_run("examples/ddp_digits.py", events_dir="logs"))
    assert (
        n.script == str(DDP_EXAMPLE)
        and n.cwd == str(DDP_EXAMPLE.parent)
        and n.events_dir == str(REPO_ROOT / "logs")
    )
    # a module: here
    assert script.normalized(script_run("-m pkg.train")).cwd == str(REPO_ROOT)
    assert script.normalized(script_run(str(DDP_EXAMPLE), cwd=str(tmp_path))).cwd == str(tmp_path)


@pytest.mark.parametrize(
    "cfg,field,text",
    [
        (
            script_run(),
            "script",
            "no script given: give the path of your training script (a .py file), or -m "
            "package.module",
        ),
        (
            script_run("/no/such/train.py"),
            "script",
            "'/no/such/train.py' does not exist: give the path",
        ),
        (
            script_run(str(REPO_ROOT / "examples")),
            "script",
            "is a folder: give the .py file inside it",
        ),
        (
            script_run(str(REPO_ROOT / "README.md")),
            "script",
            "is not a Python file (.py)",
        ),
        (script_run("-m 3bad.mod"), "script", "is not a module name"),
        (
            script_run(str(DDP_EXAMPLE), cwd="/no/such/dir"),
            "cwd",
            "working directory '/no/such/dir' does not exist",
        ),
        (
            script_run(str(DDP_EXAMPLE), events_dir=str(DDP_EXAMPLE)),
            "events_dir",
            "is a file",
        ),
        (
            script_run(str(DDP_EXAMPLE), total_steps=-1),
            "total_steps",
            "must be 0 (unknown) or more",
        ),
        (
            script_run(str(DDP_EXAMPLE), mode="dp", nproc=2),
            "nproc",
            "runs in one process, nproc 2 given",
        ),
        (
            script_run(str(DDP_EXAMPLE), gpus=(0,)),
            "gpus",
            "GPU 0 does not exist",
        ),
        (
            script_run(str(DDP_EXAMPLE), mode="fsdp"),
            "mode",
            "run it in mode ddp",
        ),
        (
            script_run(str(DDP_EXAMPLE), name="a/b"),
            "name",
            "use letters, digits",
        ),
        (
            script_run(str(DDP_EXAMPLE), extra_env={"TORCHELASTIC_ERROR_FILE": "x"}),
            "extra_env",
            "set by the launcher",
        ),
    ],
)
def test_bad_script_configs_name_the_fix(cfg, field, text):
    found = script.problems(cfg, 0)
    assert found and found[0].field == field and text in found[0].message, found
    with pytest.raises(ConfigError):
        script.validate(cfg, 0)


def test_the_trainers_own_options_never_refuse_a_script():
    # a global batch of 64 does not split over 3 processes, but a script has no batch of ours
    assert script.problems(script_run(str(DDP_EXAMPLE), mode="ddp", nproc=3), 0) == []


def test_form_and_command_line_values_read_into_a_config():
    c, errs = script_form.script_config(
        {
            "script": " examples/ddp_digits.py ",
            "args": "--lr 0.1 --name 'a b'",
            "mode": "ddp",
            "gpus": None,
            "nproc": None,
            "tags": "x, y",
            "extra_env": "A=1",
            "total_steps": 50,
        },
        0,
    )
    assert errs == []
    assert (c.script, c.args, c.mode, c.gpus, c.nproc, c.tags, c.extra_env, c.total_steps) == (
        "examples/ddp_digits.py",
        ("--lr", "0.1", "--name", "a b"),
        "ddp",
        (),
        2,
        ("x", "y"),
        {"A": "1"},
        50,
    )
    # form_values is the inverse
    assert script_form.script_config(script_form.form_values(c), 0) == (c, [])
    c, errs = script_form.script_config({"script": "t.py", "args": "--name 'open", "gpus": "x"}, 0)
    assert {e.field for e in errs} == {"args", "gpus"} and "close the quote" in str(errs)
    form = {f.name for f in script_form.SCRIPT_FIELDS}
    assert form == {*PLACEMENT, *SCRIPT_ONLY}  # one widget per field of a script run
    assert len({f.key for f in script_form.SCRIPT_FIELDS}) == len(script_form.SCRIPT_FIELDS)


def test_preview_says_what_runs_and_where_the_curves_are_found(tmp_path):
    snap = SimpleNamespace(gpus=(), cpu=SimpleNamespace(cores=2))
    p = script_form.preview(
        script_run(str(DDP_EXAMPLE), mode="ddp", nproc=2, cwd=str(tmp_path)),
        snap,
        tmp_path / "runs",
    )
    text = "\n".join(p.preflight)
    assert "torchrun starts 2 processes (on the CPU, gloo)" in text and "@record" in text
    assert f"below {tmp_path} after the launch" in text and "TENSORBOARD_LOGDIR" in text
    assert "<port>" in p.argv and p.argv[-1] == str(DDP_EXAMPLE) and p.cwd == str(tmp_path)
    assert p.env["LAB_RUN_DIR"] == str(tmp_path / "runs" / "<run-id>")


# ---- linking folders of event files -----------------------------------------


def _event(folder: Path, created: float, pid: int | None = 4242) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    name = f"events.out.tfevents.{int(created):010d}.host.x" + (
        f".{pid}.0" if pid is not None else ""
    )
    (folder / name).write_bytes(b"")
    return folder


def test_event_dirs_created_after_the_launch_by_the_runs_processes(tmp_path):
    t0 = time.time()
    mine = _event(tmp_path / "runs" / "Nov29_10-00-00_host", t0 + 2)
    _event(tmp_path / "runs" / "old", t0 - 3600)  # before the launch: someone else's
    _event(tmp_path / "runs" / "other-run", t0 + 2, pid=999)  # a process not in this run
    _event(tmp_path / ".hidden" / "x", t0 + 2)
    _event(tmp_path / "node_modules" / "x", t0 + 2)
    (tmp_path / "a-lab-run").mkdir()
    (tmp_path / "a-lab-run" / "run.json").write_text("{}")
    _event(tmp_path / "a-lab-run" / "tb", t0 + 2)  # another lab run's own curves
    tbx = _event(tmp_path / "tbx", t0 + 2, pid=None)  # tensorboardX names carry no pid
    deep = tmp_path.joinpath(*[f"d{i}" for i in range(linked.MAX_DEPTH + 1)])
    _event(deep, t0 + 2)
    found, bounded = linked.find_event_dirs(tmp_path, t0, {4242})
    assert found == sorted([str(mine), str(tbx)]) and not bounded
    assert file_origin("events.out.tfevents.1764402300.my.host.name.123.7.v2") == (
        1764402300,
        123,
    )


def test_the_walk_reads_no_more_than_its_entry_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(linked, "MAX_ENTRIES", 8)
    (tmp_path / "big").mkdir()
    for i in range(50):
        (tmp_path / "big" / f"f{i}").write_text("")
    shallow = _event(tmp_path / "runs" / "x", time.time())
    # past the budget once a, b, c are read
    _event(tmp_path / "a" / "b" / "c" / "deep", time.time())
    (tmp_path / "a" / "b" / "c" / "more").write_text("")
    (tmp_path / "a" / "b" / "c" / "other").write_text("")
    # the big folder skipped, runs/ found
    assert linked.find_event_dirs(tmp_path, 0) == ([str(shallow)], True)
    monkeypatch.setattr(linked, "MAX_ENTRIES", 1000)
    assert len(linked.find_event_dirs(tmp_path, 0)[0]) == 2


def test_linker_keeps_what_it_found_and_scans_at_most_every_interval(tmp_path):
    run_dir, cwd = tmp_path / "run", tmp_path / "work"
    cwd.mkdir()
    trainer = linked.EventLinker({"config": {}}, run_dir)
    assert (
        trainer.kind == "trainer"
        and trainer.dirs == [str(run_dir / "tb")]
        and not trainer.scan(force=True)
    )
    lk = linked.EventLinker(
        {"kind": "script", "cwd": str(cwd), "config": {"events_dir": "/given"}},
        run_dir,
        time.time(),
    )
    assert lk.dirs == ["/given"]
    lk.note([4242])
    first = _event(cwd / "runs" / "a", time.time())
    assert lk.scan() and lk.dirs == ["/given", str(first)]
    _event(cwd / "runs" / "b", time.time())
    assert not lk.scan()  # within the interval: nothing read
    assert lk.scan(force=True) and len(lk.dirs) == 3
    # TENSORBOARD_LOGDIR: the run's own, whatever wrote it
    _event(run_dir / "tb", time.time(), pid=1)
    assert lk.scan(force=True) and lk.dirs[-1] == str(run_dir / "tb")


# ---- the argparse diagnosis ---------------------------------------------------


def test_an_argparse_refusal_is_bad_input_with_its_line(tmp_path):
    (tmp_path / "run.json").write_text('{"kind": "script"}')
    (tmp_path / "stdout.log").write_text(
        "usage: dp_digits.py [-h] [--epochs EPOCHS]\n"
        "dp_digits.py: error: argument --epochs: invalid int value: 'zero'\n"
    )
    d = diagnose(tmp_path, 2)
    assert (
        d.key == "bad_input"
        and d.excerpt == "dp_digits.py: error: argument --epochs: invalid int value: 'zero'"
    )
    assert d.cause == f"The script refused its arguments: {d.excerpt}"
    assert diagnose(tmp_path, 1).key == "crashed"  # not exit code 2: not argparse's refusal


# ---- the command line ---------------------------------------------------------


@pytest.mark.proc
def test_launch_help_documents_the_script_options():
    out = run_lab(Path("/nonexistent"), "launch", "--help").stdout
    for text in (
        "--script PATH",
        "--module NAME",
        "--cwd DIR",
        "--events-dir DIR",
        "--total-steps N",
        "-- ARGS...",
        "everything after -- is handed to the script",
        "list_models",
    ):
        assert text in out, text


@pytest.mark.proc
@pytest.mark.parametrize(
    "args,text",
    [
        (
            ["--script", "no/such.py"],
            "error: script: 'no/such.py' does not exist: give the path of your training script",
        ),
        (["--script", "README.md"], "error: script: 'README.md' is not a Python file (.py)"),
        (
            ["--script", "examples/dp_digits.py", "--cwd", "/no/such/dir"],
            "error: cwd: working directory '/no/such/dir' does not exist",
        ),
        (
            ["--script", "examples/dp_digits.py", "--epochs", "5"],
            "error: --epochs is an option of the lab's trainer, not of your script",
        ),
        (
            ["--script", "examples/dp_digits.py", "--module", "x.y"],
            "error: give --script PATH or --module NAME, not both",
        ),
        (
            ["--", "--epochs", "3"],
            "error: arguments after -- go to a script of your own: give --script PATH",
        ),
    ],
)
def test_refused_before_anything_starts_with_one_line(runs_dir, args, text):
    r = run_lab(runs_dir, "launch", *args)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith(text), r.stderr
    assert list(runs_dir.iterdir()) == []


@pytest.mark.proc
def test_dry_run_shows_the_command_with_the_scripts_own_arguments(runs_dir, tmp_path):
    r = run_lab(
        runs_dir,
        "launch",
        "--script",
        "examples/ddp_digits.py",
        "--mode",
        "ddp",
        "--nproc",
        "2",
        "--cwd",
        str(tmp_path),
        "--dry-run",
        "--",
        "--epochs",
        "1",
        "--lr",
        "0.1",
    )
    assert r.returncode == 0, r.stderr
    assert (
        f"cd {tmp_path}" in r.stdout and "--nproc-per-node 2" in r.stdout and "--lr 0.1" in r.stdout
    )
    assert r.stdout.startswith("# Visible GPUs") and list(runs_dir.iterdir()) == []
