"""The list of runs on disk, reconciled with the processes that are really alive.

``list_runs`` reads each run folder (run.json, status.json, progress.json,
summary.json; a missing or half-written file counts as absent, so listing
never hangs or raises on a folder being written). A run that says it is
queued/starting/running but whose supervisor is gone (dead, a zombie, or its
pid reused by another process: the create time differs) is marked ``lost``
on disk. ``delete_run`` refuses a live run and checks the id first.
"""
from __future__ import annotations

import logging
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lab.engine import procs
from lab.runfolder import LIVE_STATES, age_s, check_run_id, now_iso, read_json, runs_dir, write_json_atomic

log = logging.getLogger(__name__)

# the launcher writes "queued" before its supervisor records a pid; only after
# this long without one is the run considered lost
_QUEUED_GRACE_S = 60.0


class RunNotFound(LookupError):
    """No such run in the runs folder."""


class RunIsLive(RuntimeError):
    """The run still has processes; stop it first."""


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    run_dir: str
    state: str
    mode: str | None
    name: str
    created_at: str | None
    exit_code: int | None
    diagnosis: dict | None
    config: dict
    sweep_id: str | None
    progress: dict | None
    summary: dict | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _supervisor_gone(st: dict) -> bool:
    pid = st.get("supervisor_pid")
    if not pid:
        return st.get("state") == "queued" and (age_s(st.get("updated_at")) or 0.0) > _QUEUED_GRACE_S
    return not procs.alive(pid, st.get("supervisor_ct"))


def _reconcile(run_dir: Path, st: dict) -> dict:
    if st.get("state") not in LIVE_STATES or not _supervisor_gone(st):
        return st
    fresh = read_json(run_dir / "status.json") or st  # it may have finished between our reads
    if fresh.get("state") not in LIVE_STATES or not _supervisor_gone(fresh):
        return fresh
    fresh = dict(fresh, state="lost", updated_at=now_iso(),
                 lost_reason="its supervisor process is gone (killed, or the machine restarted)")
    try:
        write_json_atomic(run_dir / "status.json", fresh)
    except OSError as e:  # a read-only folder still lists, just not persisted
        log.warning("could not mark %s lost: %s", run_dir.name, e)
    return fresh


def _record(run_dir: Path) -> RunRecord | None:
    run = read_json(run_dir / "run.json")
    st = read_json(run_dir / "status.json")
    summary = read_json(run_dir / "summary.json")
    if run is None and st is None and summary is None:
        return None
    run = run or {}
    if st is None and run:  # the launcher writes run.json a moment before status.json
        st = {"state": "queued", "updated_at": run.get("created_at")}
    elif st is None:  # a trainer run made by hand (python -m training.train): only its summary
        st = {"state": "succeeded" if summary and summary.get("completed") else "unknown"}
    st = _reconcile(run_dir, st)
    cfg = run.get("config") if isinstance(run.get("config"), dict) else (summary or {}).get("config") or {}
    return RunRecord(
        run_id=run_dir.name,
        run_dir=str(run_dir),
        state=str(st.get("state", "unknown")),
        mode=cfg.get("mode") or (summary or {}).get("mode"),
        name=str(run.get("name") or ""),
        created_at=run.get("created_at") or (summary or {}).get("started_at"),
        exit_code=st.get("exit_code"),
        diagnosis=st.get("diagnosis"),
        config=cfg,
        sweep_id=run.get("sweep_id"),
        progress=read_json(run_dir / "progress.json"),
        summary=summary,
    )


def list_runs(root: Path | None = None) -> list[RunRecord]:
    """Every run under ``root`` (default: the runs folder), newest first."""
    root = Path(root).resolve() if root else runs_dir()
    try:
        entries = [e for e in os.scandir(root) if not e.name.startswith(".") and e.is_dir()]
    except OSError:
        return []
    out = []
    for e in entries:
        try:
            check_run_id(e.name)
        except ValueError:
            continue
        rec = _record(Path(e.path))
        if rec is not None:
            out.append(rec)
    out.sort(key=lambda r: (r.created_at or "", r.run_id), reverse=True)
    return out


def get_run(run_id: str, root: Path | None = None) -> RunRecord:
    """One run, reconciled; ``RunNotFound`` when there is none."""
    root = Path(root).resolve() if root else runs_dir()
    run_dir = root / check_run_id(run_id)
    rec = _record(run_dir) if run_dir.is_dir() else None
    if rec is None:
        raise RunNotFound(f"no run {run_id!r} in {root}: see `python -m lab status` for the run ids")
    return rec


def delete_run(run_id: str, root: Path | None = None) -> None:
    """Remove a finished run's folder; refuse a live one."""
    rec = get_run(check_run_id(run_id), root)
    if rec.state in LIVE_STATES:
        raise RunIsLive(f"run {run_id} is {rec.state}: stop it first (python -m lab stop {run_id})")
    st = read_json(Path(rec.run_dir) / "status.json") or {}
    if rec.state == "lost" and procs.alive(st.get("pid"), st.get("pid_ct")):
        raise RunIsLive(f"run {run_id} is lost but its training processes still run: stop it first (python -m lab stop {run_id})")
    shutil.rmtree(rec.run_dir)
