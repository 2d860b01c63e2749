"""The way in (issue 36): the installed ``lab`` works from any folder, and a Python without the
lab's packages says in one line how to run it. Real processes: the venv's ``lab`` script, the
interpreter the venv was made from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.proc
REPO = Path(__file__).resolve().parent.parent


def test_the_installed_lab_works_from_another_folder(tmp_path):
    lab = Path(sys.executable).parent / "lab"
    if not lab.exists():
        if os.environ.get("CI") == "true":
            pytest.fail("scripts/venv.sh installs the lab into .venv: .venv/bin/lab is missing")
        pytest.skip("the lab is not installed in this venv: scripts/venv.sh installs it")
    env = dict(os.environ, LAB_RUNS_DIR=str(tmp_path / "runs"))
    (tmp_path / "runs").mkdir()
    p = subprocess.run([str(lab), "status"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert (p.returncode, p.stderr) == (0, "")
    assert p.stdout.strip() == f"no runs in {tmp_path / 'runs'} (LAB_RUNS_DIR names another folder)"
    bad = subprocess.run(
        [str(lab), "sweep", "--mode", "ddp"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: lab sweep: ")
    # a relative script path is the caller's: ./train.py here, not in the repository
    (tmp_path / "train.py").write_text("print('hello')\n")
    dry = subprocess.run(
        [str(lab), "launch", "--script", "./train.py", "--dry-run", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert dry.returncode == 0, dry.stderr
    assert str(tmp_path / "train.py") in json.loads(dry.stdout)["argv"]


def test_a_python_without_the_lab_s_packages_says_how_to_run_it(tmp_path):
    base = Path(sys.base_prefix) / "bin" / "python3"
    probe = subprocess.run([str(base), "-c", "import psutil"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip(f"{base} has psutil: it is not a Python without the lab's packages")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    p = subprocess.run(
        [str(base), "-m", "lab", "status"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "source .venv/bin/activate" in p.stderr


def test_a_reader_that_stops_early_ends_the_listing_quietly(tmp_path):
    from tests.scale_fixtures import make_runs

    runs = tmp_path / "runs"
    runs.mkdir()
    make_runs(runs, 800)  # ~90 KB of status lines: more than a pipe holds
    env = dict(os.environ, LAB_RUNS_DIR=str(runs))
    p = subprocess.Popen(
        [sys.executable, "-m", "lab", "status"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    first = p.stdout.readline()  # `lab status | head -1`
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0 and first and err == ""
