"""``lab compare --json`` on each recorded sample sweep (sample_data/runs) gives what it gave
when the golden files in tests/data/compare_json_golden/ were written: the pin that holds the
Compare page's numbers and words while the code that reads run.json, status.json and summary.json
changes (issue 54). In this process (``lab.cli.main``), on a copy of the sample runs.

The output names no absolute path and no time of day, so nothing is normalised but floats, to 10
significant digits (a float's last digit may differ between numpy builds). When the sample runs are
re-recorded (or Compare's output is meant to change), rewrite the golden files with
``.venv/bin/python -m tests.test_compare_json_golden`` and read the diff before committing it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from lab.runfolder import SAMPLE_RUNS, SWEEPS_DIR
from tests.helpers.cli import lab_in_process

GOLDEN = Path(__file__).resolve().parent / "data" / "compare_json_golden"
SWEEPS = sorted(p.stem for p in (SAMPLE_RUNS / SWEEPS_DIR).glob("sweep-*.json"))


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.10g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


@pytest.fixture(scope="module")
def sample_root(tmp_path_factory) -> Path:
    # a copy: compare reads the runs folder only, but a test must not risk the tracked one
    root = tmp_path_factory.mktemp("runs") / "runs"
    shutil.copytree(SAMPLE_RUNS, root)
    return root


def test_every_sample_sweep_has_a_golden_file():
    assert SWEEPS, f"no sample sweeps in {SAMPLE_RUNS / SWEEPS_DIR}"
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == SWEEPS


@pytest.mark.parametrize("sweep_id", SWEEPS)
def test_compare_json_is_unchanged(sweep_id, sample_root, monkeypatch, capsys):
    monkeypatch.setenv("LAB_RUNS_DIR", str(sample_root))
    got = lab_in_process(capsys, "compare", "--json", sweep_id)
    assert got.returncode == 0, got.stderr
    want = json.loads((GOLDEN / f"{sweep_id}.json").read_text(encoding="utf-8"))
    assert _rounded(json.loads(got.stdout)) == _rounded(want)


if __name__ == "__main__":  # rewrite the golden files from today's code (see the docstring)
    import os
    import subprocess
    import sys

    for sid in SWEEPS:
        out = subprocess.run(
            [sys.executable, "-m", "lab", "compare", "--json", sid],
            env=dict(os.environ, LAB_RUNS_DIR=str(SAMPLE_RUNS)),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        (GOLDEN / f"{sid}.json").write_text(out, encoding="utf-8")
