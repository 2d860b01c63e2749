"""A runs folder grown by months of use: copies of the shipped sample runs under new ids (no sweep
records), made in a temp folder by the tests and by bench/pages_at_scale.py."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

from lab.runfolder import SAMPLE_RUNS

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
SKIP = shutil.ignore_patterns("profile", "logs", "stdout.log")  # not needed to draw the pages


def make_runs(dst: Path, n: int) -> list[str]:
    """``n`` finished runs in ``dst``, copies of the sample runs under new ids, newest last;
    returns their ids."""
    samples = sorted(d for d in SAMPLE_RUNS.iterdir() if (d / "run.json").exists())
    ids = []
    for i in range(n):
        src = samples[i % len(samples)]
        rid = f"20260101-{i:06d}-{src.name.split('-')[2]}-copy{i}"
        shutil.copytree(src, dst / rid, ignore=SKIP)
        for name in ("run.json", "status.json", "summary.json"):
            p = dst / rid / name
            if not p.exists():
                continue
            data = json.loads(p.read_text())
            data.pop("sweep_id", None)
            if "run_id" in data:
                data["run_id"] = rid
            if name == "run.json":
                data["created_at"] = (START + timedelta(minutes=i)).isoformat(timespec="seconds")
                data["name"] = f"copy-{i}"
            p.write_text(json.dumps(data))
        ids.append(rid)
    return ids
