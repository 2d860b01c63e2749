"""A run of a sweep that varied one option."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.compare_runs import spread_run


def _varied_run(root: Path, run_id: str, median: float, varied: dict, **kw) -> None:
    d = spread_run(root, run_id, median, median * 0.95, median * 1.05, sweep_id="s1", **kw)
    nproc = len(kw.get("devices", ())) or 1
    for name in ("run.json", "summary.json"):  # DDP's processes, as the launcher records them
        doc = json.loads((d / name).read_text())
        doc["config"]["nproc"] = nproc
        (d / name).write_text(json.dumps(dict(doc, varied=varied) if name == "run.json" else doc))
