"""The user-style scripts in examples/ run as users run them, and the lab reads what they wrote.

Real processes on CPU: ``dp_digits.py`` under plain python and
``ddp_digits.py`` under ``python -m torch.distributed.run`` with two gloo
ranks, each in a fresh temporary working directory, so SummaryWriter's default
folder (``./runs/<date>_<host>``) lands there and nowhere else. Each must exit
0, leave exactly one events folder (in DDP: rank 0's only), and its
``train/loss``, read back with the lab's own ``RunReader``, must be the loss
the script printed at every logged step. Bad arguments end non-zero with
argparse's ``error:`` line. The scripts import only torch, torchvision and the
standard library: they are written the way users write theirs, not against
the lab. Children start in their own session and the group is killed on a
timeout, so a hung run leaves nothing behind.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from lab.events import RunReader

REPO = Path(__file__).resolve().parent.parent
DP = REPO / "examples" / "dp_digits.py"
DDP = REPO / "examples" / "ddp_digits.py"
SHORT = ["--epochs", "1", "--max-steps", "5", "--log-every", "1"]
# CPU only, one thread per process: the machine is shared and the test must mean the same
# everywhere.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
PRINTED = re.compile(r"step (\d+) loss ([0-9.]+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd: list[str], cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own session; on a timeout kill the whole group (torchrun's workers
    too)."""
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{cmd} did not end within {timeout} s:\n{out}\n{err}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def torchrun(*args: str) -> list[str]:
    """torchrun of an example in the working folder; its own logs there too (without
    ``--log-dir`` torchrun makes a folder in /tmp and leaves it there)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        "--log-dir",
        "torchrun-logs",
        *args,
    ]


@pytest.fixture(scope="module")
def dp_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    cwd = tmp_path_factory.mktemp("dp")
    return cwd, run([sys.executable, str(DP), *SHORT], cwd)


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    cwd = tmp_path_factory.mktemp("ddp")
    return cwd, run(torchrun(str(DDP), *SHORT), cwd)


def events_folder(cwd: Path) -> Path:
    """The one folder SummaryWriter() chose below ``cwd``, holding exactly one event file."""
    folders = sorted((cwd / "runs").iterdir())
    assert len(folders) == 1, folders
    # <date>_<host>
    assert re.fullmatch(r"[A-Z][a-z]{2}\d\d_\d\d-\d\d-\d\d_.+", folders[0].name), folders[0].name
    files = [p.name for p in folders[0].iterdir()]
    assert len(files) == 1 and "tfevents" in files[0], files
    return folders[0]


def check_losses_read_back(cwd: Path, stdout: str) -> None:
    reader = RunReader(events_folder(cwd))
    assert reader.refresh() > 0 and not reader.warnings, reader.warnings
    scalars = reader.scalars()
    assert {"train/loss", "train/acc", "val/loss", "val/acc"} <= set(scalars), sorted(scalars)
    loss = scalars["train/loss"]
    printed = {int(s): float(v) for s, v in PRINTED.findall(stdout)}
    assert loss.step.tolist() == sorted(printed) == [1, 2, 3, 4, 5], (loss.step, stdout)
    for step, value in zip(loss.step.tolist(), loss.value.tolist()):
        assert value == pytest.approx(printed[step], abs=2e-6), (step, value, printed[step])
    assert scalars["val/acc"].step.tolist() == [5]  # validation after the (shortened) epoch


@pytest.mark.proc
def test_dp_script_writes_its_default_events_folder(dp_run):
    cwd, res = dp_run
    assert res.returncode == 0, res.stdout + res.stderr
    # It says which way it ran; here (no GPU visible) it runs unwrapped.
    assert "one device (cpu): DataParallel needs at least two GPUs" in res.stdout, res.stdout
    check_losses_read_back(cwd, res.stdout)


@pytest.mark.proc
def test_ddp_script_two_ranks_only_rank0_writes(ddp_run):
    cwd, res = ddp_run
    assert res.returncode == 0, res.stdout + res.stderr
    assert "2 processes (gloo)" in res.stdout, res.stdout
    assert len(PRINTED.findall(res.stdout)) == 5  # rank 0 alone prints the logged steps
    assert "terminate called" not in res.stderr  # the barrier before destroy_process_group holds
    check_losses_read_back(cwd, res.stdout)


@pytest.mark.proc
def test_ddp_script_under_plain_python_is_a_group_of_one(tmp_path):
    res = run([sys.executable, str(DDP), *SHORT], tmp_path)  # what `sweep --script` runs as single
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 processes (gloo)" in res.stdout, res.stdout
    check_losses_read_back(tmp_path, res.stdout)


@pytest.mark.proc
def test_fake_data_needs_no_files(tmp_path):
    res = run(
        [
            sys.executable,
            str(DP),
            "--fake-data",
            "--data",
            str(tmp_path / "absent"),
            "--epochs",
            "1",
            "--max-steps",
            "2",
            "--log-every",
            "1",
        ],
        tmp_path,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    reader = RunReader(events_folder(tmp_path))
    reader.refresh()
    assert reader.scalars()["train/loss"].step.tolist() == [1, 2]


@pytest.mark.proc
def test_bad_argument_ends_with_argparse_error(tmp_path):
    res = run([sys.executable, str(DP), "--epochs", "zero"], tmp_path)
    assert res.returncode == 2
    assert "dp_digits.py: error: argument --epochs: invalid int value: 'zero'" in res.stderr, (
        res.stderr
    )
    assert not (tmp_path / "runs").exists()


@pytest.mark.proc
def test_missing_data_folder_names_the_fix(tmp_path):
    res = run([sys.executable, str(DP), "--data", str(tmp_path / "nowhere")], tmp_path)
    assert res.returncode == 2
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("dp_digits.py: error: --data ") and last.endswith(
        "or use --fake-data"
    ), last


@pytest.mark.proc
def test_ddp_bad_argument_under_torchrun_fails_the_job(tmp_path):
    res = run(torchrun(str(DDP), "--batch-size", "many"), tmp_path)
    assert res.returncode != 0
    assert "ddp_digits.py: error: argument --batch-size: invalid int value: 'many'" in res.stderr, (
        res.stderr
    )
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("script", [DP, DDP], ids=lambda p: p.name)
def test_examples_import_only_torch_torchvision_and_stdlib(script):
    """Written like a user's own script: nothing of the lab or the trainer, no other package."""
    tree = ast.parse(script.read_text())
    mods = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    mods |= {
        n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
    }
    outside = {m for m in mods if m not in sys.stdlib_module_names and m != "__future__"}
    assert outside == {"torch", "torchvision"}, outside
    # short enough to read as a tutorial (ddp_digits.py's --fsdp, FSDP2's recipe, takes 20 more)
    assert len(script.read_text().splitlines()) <= 175
