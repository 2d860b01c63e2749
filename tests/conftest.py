"""Shared fixtures and the rules for the ``gpu``, ``e2e`` and ``slurm`` markers."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def _gpu_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return 0


def pytest_collection_modifyitems(config, items):
    gpus = _gpu_count()
    skip_gpu = pytest.mark.skip(reason="needs an NVIDIA GPU and driver; none found on this machine")
    chromium = os.environ.get("LAB_CHROMIUM", "/usr/bin/chromium")
    skip_e2e = pytest.mark.skip(reason=f"needs Debian's chromium at {chromium}; run scripts/test.sh as root to install it")
    # Slurm: skipped with the reason where it is missing, except under CI, where the tests then fail on it
    no_slurm = next((f"needs {exe}: run scripts/test.sh as root to install slurm-wlm and munge" for exe in
                     ("slurmctld", "slurmd", "sbatch", "munged") if not shutil.which(exe)), None) or (
        "needs root: the private test cluster's slurmd starts jobs as their user" if os.geteuid() != 0 else None)
    skip_slurm = pytest.mark.skip(reason=no_slurm or "")
    for item in items:
        if "gpu" in item.keywords and gpus == 0:
            item.add_marker(skip_gpu)
        if "e2e" in item.keywords and not shutil.which(chromium):
            item.add_marker(skip_e2e)
        if "slurm" in item.keywords and no_slurm and os.environ.get("CI") != "true":
            item.add_marker(skip_slurm)


def _worktree_state() -> str | None:
    """What ``git status`` and ``git diff`` say of the checkout (None outside git)."""
    import subprocess

    try:
        return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=30, check=True).stdout + \
            subprocess.run(["git", "diff", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                           timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def pytest_sessionstart(session):
    session.config._lab_git_before = _worktree_state()


def pytest_sessionfinish(session, exitstatus):
    """Tests never write into the checkout: the suite fails if ``git status`` changed under it."""
    before = getattr(session.config, "_lab_git_before", None)
    after = _worktree_state()
    if before is not None and after is not None and after != before:
        changed = sorted(set(after.splitlines()) - set(before.splitlines()))[:10]
        session.config.get_terminal_writer().line(
            "the test run changed the checkout (tests must write only to temp folders): " + "; ".join(changed), red=True)
        session.exitstatus = 1


@pytest.fixture
def runs_dir(tmp_path, monkeypatch) -> Path:
    """A private runs folder for one test, also exported as LAB_RUNS_DIR."""
    d = tmp_path / "runs"
    d.mkdir()
    monkeypatch.setenv("LAB_RUNS_DIR", str(d))
    return d
