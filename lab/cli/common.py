"""What every subcommand shares: the runs folder, JSON output, the device snapshot, and the
one exception a bad command line raises (printed as one line, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lab.cli.parser import PROG
from lab.runfolder import runs_dir


class UserError(Exception):
    """Bad input from the command line: printed as one line, exit 2."""


def root() -> Path:
    """Where runs live: ./runs, or ``LAB_RUNS_DIR``."""
    return runs_dir()


def next_commands(run_id: str) -> str:
    """What to type next after a launch (printed on stderr: stdout stays the run's line)."""
    return f"next: {PROG} status {run_id}, {PROG} logs {run_id}, {PROG} stop {run_id}"


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=1, default=str))


def snapshot():
    """The devices now, with each GPU process matched to the lab's runs."""
    from lab.engine import registry
    from lab.engine.devices import nvml as devices

    return devices.snapshot(registry.process_owner(root()), registry.gpu_users(root()))
