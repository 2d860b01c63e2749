"""User-style script runs: the examples, a short run's options, the curves a finished one
must show."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lab.events import RunReader
from lab.runfolder import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples"


SHORT = ["--epochs", "1", "--max-steps", "5", "--log-every", "1"]


PRINTED = re.compile(r"^(?:\[default0\]:)?epoch \d+ step (\d+) loss ([0-9.]+)", re.M)


def check_curves(st: dict, cwd: Path, run_dir: Path, prefix: str) -> None:
    """events_dirs is the folder SummaryWriter() chose, and its train/loss is what the script
    printed."""
    log = (run_dir / "stdout.log").read_text()
    chosen = re.search(rf"^{re.escape(prefix)}.*events in (\S+)$", log, re.M)
    assert chosen, log[-2000:]
    assert st["events_dirs"] == [str(cwd / chosen.group(1))], (st["events_dirs"], chosen.group(1))
    # ./runs/<date>_<host>, below the working directory
    assert Path(st["events_dirs"][0]).parent == cwd / "runs"
    reader = RunReader(st["events_dirs"][0])
    assert reader.refresh() > 0 and not reader.warnings
    loss = reader.scalars()["train/loss"]
    printed = {int(s): float(v) for s, v in PRINTED.findall(log)}
    assert loss.step.tolist() == sorted(printed) == [1, 2, 3, 4, 5]
    for step, value in zip(loss.step.tolist(), loss.value.tolist()):
        assert value == pytest.approx(printed[step], abs=2e-6), step
