"""Where things live on disk: the repository, the runs folder, the sample data.

The runs folder is ``./runs`` (relative to the working directory) unless the
``LAB_RUNS_DIR`` environment variable names another one.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLE_DATA = REPO_ROOT / "sample_data"
SAMPLE_RUNS = SAMPLE_DATA / "runs"
DIGITS = SAMPLE_DATA / "digits"

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class BadRunId(ValueError):
    """A run id that could escape the runs folder or is not one of ours."""


def runs_dir() -> Path:
    """The runs folder: ``$LAB_RUNS_DIR`` or ``./runs``, resolved."""
    return Path(os.environ.get("LAB_RUNS_DIR") or "runs").expanduser().resolve()


def check_run_id(run_id: str) -> str:
    """Return ``run_id`` if it is a plain folder name, else raise ``BadRunId``.

    Checked before a run id touches the filesystem: no separators, no ``..``,
    no leading dot.
    """
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id) or ".." in run_id:
        raise BadRunId(
            f"{run_id!r} is not a valid run id: use letters, digits, '.', '_' and '-' only"
        )
    return run_id


def run_path(run_id: str, root: Path | None = None) -> Path:
    """The folder of ``run_id`` inside ``root`` (default: the runs folder)."""
    return (root or runs_dir()) / check_run_id(run_id)


def now_iso() -> str:
    """Now, UTC, ISO 8601 to the second: the timestamps of run.json and status.json."""
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read_json(path: Path) -> dict | None:
    """The JSON object in ``path``, or None when it is missing, half-written or not an object.

    Files in a run folder are rewritten while we read them; a torn read is
    treated as "not there yet" rather than an error.
    """
    import json

    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json_atomic(path: Path, data: dict) -> None:
    """Write ``data`` to ``path`` via a temp file and ``os.replace`` so readers never see half of it."""
    import json
    import tempfile

    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, default=str)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; other readers (a dashboard user) need to read it
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
