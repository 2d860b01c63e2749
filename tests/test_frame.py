"""The project frame keeps its promises: loopback-only server, pinned torch, a two-command Quick
start."""

from __future__ import annotations

import re
import tomllib

from lab.runfolder import REPO_ROOT


def test_streamlit_listens_on_loopback_only():
    conf = tomllib.loads((REPO_ROOT / ".streamlit" / "config.toml").read_text())
    server = conf["server"]
    assert server["address"] == "127.0.0.1"
    assert set(server["allowedHosts"]) <= {"localhost", "127.0.0.1", "::1"}
    assert server["fileWatcherType"] == "none"
    assert conf["browser"]["gatherUsageStats"] is False


def test_torch_pair_is_pinned():
    req = (REPO_ROOT / "requirements.txt").read_text().splitlines()
    assert "torch==2.14.1" in req and "torchvision==0.29.1" in req
    # every runtime requirement is pinned, so a fresh clone installs what was tested
    pkgs = [line for line in req if line.strip() and not line.startswith("#")]
    assert all("==" in line for line in pkgs), pkgs


def test_quick_start_is_two_commands_and_ci_runs_the_second():
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands = [c for c in block.splitlines() if c.strip()]
    assert commands == ["bash scripts/start.sh", "bash scripts/test.sh"]
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert commands[1] in ci


def test_both_commands_use_the_repos_own_isolated_venv():
    """start.sh ends in `streamlit run app.py` from .venv; neither script installs into the system
    Python."""
    start = (REPO_ROOT / "scripts" / "start.sh").read_text()
    test = (REPO_ROOT / "scripts" / "test.sh").read_text()
    venv = (REPO_ROOT / "scripts" / "venv.sh").read_text()
    assert start.rstrip().splitlines()[-1] == 'exec "$PY" -m streamlit run app.py "$@"'
    # with arguments; the whole suite, every test once: all but the serial tests on two workers
    # under coverage, then the tests marked serial alone, from the files that mark some
    passes = [line for line in test.splitlines() if line.startswith('"$PY" -m pytest -')]
    assert 'exec "$PY" -m pytest "$@"' in test and passes == [
        '"$PY" -m pytest --cov --cov-report= -n 2 --dist loadgroup -m "not serial"',
        '"$PY" -m pytest -m "(proc or e2e or slurm or gpu) and serial" "${serial_files[@]}"',
    ]
    # a failing first pass fails the script before the fake-GPU pass
    assert "set -euo pipefail" in test
    for script in (start, test):
        assert "source scripts/venv.sh" in script and "pip install" not in script
    assert "--system-site-packages" not in venv.replace("(--system-site-packages)", "")
    assert 'PY="$VENV/bin/python"' in venv
