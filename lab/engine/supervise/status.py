"""status.json of one run, as its watcher writes it: the supervisor's, the Slurm watcher's and an
adopting watcher's one writer (docs/contracts.md)."""

from __future__ import annotations

from pathlib import Path

from lab.engine.supervise.diskfull import write_status
from lab.runfolder import QUEUED, STATUS_JSON, now_iso
from lab.runrecords import read_status


class Status:
    """status.json of one run: merge-and-rewrite atomically on every change."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / STATUS_JSON
        self.data = read_status(run_dir).data or {"state": QUEUED}

    def update(self, **kw) -> None:
        self.data.update(kw)
        self.data["updated_at"] = now_iso()
        write_status(self.path, self.data)  # a full disk: logged, kept for the next update
