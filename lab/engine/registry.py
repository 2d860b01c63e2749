"""The list of runs on disk, reconciled with the processes that are really alive.

``list_runs`` reads each run folder (run.json, status.json, progress.json, summary.json; a missing
or half-written file counts as absent, so listing never hangs or raises on a folder being written).
A run that says it is queued/starting/running but whose supervisor is gone (dead, a zombie, or its
pid reused by another process: the create time differs) is reported ``lost``: computed on every
read, never written (a listing writes nothing; whoever ends such a run records its end, e.g.
``launcher.stop``). A record also says where the run went (``backend``) and, for a Slurm run, its
job as its watcher last saw it (``slurm``: job_id, state, reason, nodes). ``delete_run`` refuses a
live run and checks the id first. ``process_owner`` tells which run a process belongs to,
``gpu_users`` which runs chose a GPU (for the GPU process list of ``devices.snapshot``). A record
says its ``kind`` (the trainer's or a user's script) and ``events_dirs`` (the folders of its curves,
as the supervisor linked them), its ``health`` findings and torchrun ``restarts`` (status.json), and
the resume links: ``resumed_from`` (the supervisor's, from run.json) and ``resumed_by`` (computed on
read from the other runs' run.json). A listing is incremental: a file whose inode, mtime and size
are as they were is not read again (``runfolder.read_json_kept``), so listing 1,000 unchanged runs
costs a few ``stat`` calls each; whether a live run's supervisor is alive is asked every time."""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from lab.engine import procs
from lab.engine.slurm.states import STATE_MAP
from lab.runfolder import (
    HAS_PROCESSES,
    LINKCHECKS_DIR,
    LIVE_STATES,
    LOST,
    QUEUED,
    RUN_FILES,
    STATUS_JSON,
    SUCCEEDED,
    TB_DIR,
    TRAINER,
    UNREADABLE,
    age_s,
    check_run_id,
    damaged_files,
    is_live,
    root_or_default,
    settled_signature,
)
from lab.runrecords import (
    RunFile,
    StatusFile,
    read_progress,
    read_run,
    read_status,
    read_summary,
    status_file,
)

# a run is queued from the moment run.json is written until its supervisor
# records a pid; only after this long without one is the run considered lost
_QUEUED_GRACE_S = 60.0
LOST_REASON = "its supervisor process is gone (killed, or the machine restarted)"


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
    kind: str = TRAINER  # "trainer" or "script" (a user's own script)
    events_dirs: list[str] = field(default_factory=list)  # absolute folders of the run's curves
    backend: str = "local"
    slurm: dict | None = None  # a Slurm run's job: {"job_id", "state", "reason", "nodes"}
    # the supervisor's findings (lab.engine.health.rules)
    health: list[dict] = field(default_factory=list)
    # torchrun's restarts (lab.engine.health.restarts)
    restarts: list[dict] = field(default_factory=list)
    resumed_from: str | None = None  # the run whose checkpoint this one started from
    resumed_by: list[str] = field(default_factory=list)  # runs resumed from this one: found on read
    # run files that are empty, truncated or not JSON (state ``unreadable`` unless it still runs)
    unreadable: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _supervisor_gone(st: dict) -> bool:
    pid = st.get("supervisor_pid")
    if not pid:
        return st.get("state") == QUEUED and (age_s(st.get("updated_at")) or 0.0) > _QUEUED_GRACE_S
    return not procs.alive(pid, st.get("supervisor_ct"))


def _reconcile(run_dir: Path, st: dict) -> dict:
    """``st``, or a copy saying ``lost`` when it claims to be live but its supervisor is gone.
    Writes nothing."""
    if not is_live(st.get("state")) or not _supervisor_gone(st):
        return st
    fresh = read_status(run_dir).data or st  # it may have finished between our reads
    if not is_live(fresh.get("state")) or not _supervisor_gone(fresh):
        return fresh
    return dict(fresh, state=LOST, lost_reason=LOST_REASON)


def status(run_dir: Path | str) -> dict:
    """A run's status.json as the registry sees it: with ``lost`` computed, and the state a folder
    without status.json implies (``queued`` when run.json is there; a trainer run made by hand, with
    only summary.json, ``succeeded`` or ``unknown``). Empty when the folder holds none of them."""
    run_dir = Path(run_dir)
    recorded = read_status(run_dir, kept=True)
    st = recorded.data if recorded.found else None
    if st is None and (run_dir / STATUS_JSON).is_file() and STATUS_JSON in damaged_files(run_dir):
        return {"state": UNREADABLE, "unreadable": [STATUS_JSON]}
    if st is None:
        run = read_run(run_dir, kept=True)
        summary = read_summary(run_dir, kept=True)
        if run.found:  # queued until its supervisor writes status.json
            st = {"state": QUEUED, "updated_at": run.created_at}
        # python -m training.train --log-dir by hand: only the trainer's files
        elif summary.found:
            st = {"state": SUCCEEDED if summary.completed else "unknown"}
        elif damaged_files(run_dir):
            return {"state": UNREADABLE}
        else:
            return {}
    return _reconcile(run_dir, st)


def status_record(run_dir: Path | str) -> StatusFile:
    """``status`` as a typed record: ``found`` False when the folder holds no run."""
    return status_file(status(run_dir) or None)


def _state(run_dir: Path, st: StatusFile) -> tuple[str, list[str]]:
    """The state a record shows, and the damaged run files: ``unreadable`` when any of the four
    is damaged, unless status.json is whole and says the run still runs (a live run's figures
    come back with the trainer's next write)."""
    state = "unknown" if st.state is None else str(st.state)
    damaged = damaged_files(run_dir)
    if damaged and (state not in LIVE_STATES or STATUS_JSON in damaged):
        state = UNREADABLE
    return state, damaged


# run folder -> (its files' signature, its resumed_by, its record): a finished run's record, kept
# while none of its files changed (a live run's is rebuilt each time: its supervisor may die)
_kept: dict[str, tuple[tuple, list[str], RunRecord]] = {}
_KEPT_MAX = 20_000
_SIGNED = (*RUN_FILES, TB_DIR)
_MOVING = (*LIVE_STATES, LOST)  # states the processes, not the files, may change


def _record(run_dir: Path, resumed_by: list[str] | None = None) -> RunRecord | None:
    key = os.fspath(run_dir)
    sig = settled_signature(key, _SIGNED)
    hit = _kept.get(key)
    if sig is not None and hit is not None and hit[0] == sig and hit[1] == resumed_by:
        return hit[2]
    rec = _read_record(run_dir, resumed_by)
    if sig is not None and rec is not None and resumed_by is not None and rec.state not in _MOVING:
        if len(_kept) >= _KEPT_MAX:
            _kept.pop(next(iter(_kept)), None)  # the oldest entry
        _kept[key] = (sig, resumed_by, rec)
    return rec


def _read_record(run_dir: Path, resumed_by: list[str] | None) -> RunRecord | None:
    st = status_record(run_dir)
    if not st.found:
        return None
    run = read_run(run_dir, kept=True)
    state, damaged = _state(run_dir, st)
    summary = read_summary(run_dir, kept=True)
    cfg = run.config if run.config is not None else summary.config or {}
    return RunRecord(
        run_id=run_dir.name,
        run_dir=str(run_dir),
        state=state,
        mode=cfg.get("mode") or summary.mode,
        name=run.name,
        created_at=run.created_at or summary.started_at,
        exit_code=st.exit_code,
        diagnosis=st.diagnosis,
        config=cfg,
        sweep_id=run.sweep_id,
        progress=read_progress(run_dir, kept=True) or _script_progress(st, cfg),
        summary=summary.data if summary.found else None,
        kind=str(st.kind or run.kind or TRAINER),
        events_dirs=_events_dirs(run_dir, st, run),
        backend=str(cfg.get("backend") or "local"),
        slurm=st.slurm,
        health=list(st.health),
        restarts=list(st.restarts),
        resumed_from=st.resumed_from or run.resumed_from,
        resumed_by=resumed_by if resumed_by is not None else _resumed_by(run_dir),
        unreadable=damaged,
    )


def _script_progress(st: StatusFile, cfg: dict) -> dict | None:
    """A script run's progress: the newest step of its events (the health watch's
    ``script_step``) out of its ``--total-steps``, where known."""
    step = st.script_step
    if not isinstance(step, int):
        return None
    return {"step": step, "total_steps": cfg.get("total_steps") or None}


def _resumed_by(run_dir: Path) -> list[str]:
    """The runs whose run.json says they resumed from ``run_dir``'s run: the link back, computed on
    read (the new run records it; the old run's status.json keeps its one writer)."""
    return sorted(
        d.name
        for d in _run_dirs(run_dir.parent)
        if read_run(d, kept=True).resumed_from == run_dir.name
    )


def _events_dirs(run_dir: Path, st: StatusFile, run: RunFile) -> list[str]:
    """status.json's ``events_dirs``; a run from before it was recorded: its tb/ when the trainer
    wrote one."""
    if st.events_dirs is not None:
        return [str(d) for d in st.events_dirs]
    if (run.kind or TRAINER) == TRAINER and (run_dir / TB_DIR).is_dir():
        return [str(run_dir / TB_DIR)]
    return []


def _run_dirs(root: Path) -> list[Path]:
    """The run folders under ``root``: plain run-id names, hidden ones (``.sweeps``) and the link
    checks' folder (``linkchecks``) left out."""
    try:
        entries = [
            e
            for e in os.scandir(root)
            if not e.name.startswith(".") and e.name != LINKCHECKS_DIR and e.is_dir()
        ]
    except OSError:
        return []
    out = []
    for e in entries:
        try:
            out.append(Path(root, check_run_id(e.name)))
        except ValueError:
            continue
    return out


def list_runs(root: Path | None = None) -> list[RunRecord]:
    """Every run under ``root`` (default: the runs folder), newest first."""
    dirs = _run_dirs(root_or_default(root))
    links: dict[str, list[str]] = {}
    for d in dirs:  # the links back (resumed_by), from every run.json
        src = read_run(d, kept=True).resumed_from
        if src:
            links.setdefault(str(src), []).append(d.name)
    out = [r for r in (_record(d, sorted(links.get(d.name, []))) for d in dirs) if r is not None]
    out.sort(key=lambda r: (r.created_at or "", r.run_id), reverse=True)
    return out


def get_run(run_id: str, root: Path | None = None) -> RunRecord:
    """One run, reconciled; ``RunNotFound`` when there is none."""
    root = root_or_default(root)
    run_dir = root / check_run_id(run_id)
    rec = _record(run_dir) if run_dir.is_dir() else None
    if rec is None:
        raise RunNotFound(
            f"no run {run_id!r} in {root}: see `python -m lab status` for the run ids"
        )
    return rec


def run_id_of(name: str, root: Path | None = None) -> str:
    """The run id ``name`` means: itself when a run has that id, else the one run launched with
    ``--name name``; unchanged when none is (the caller's not-found names it). Two runs of that
    name raise ``RunNotFound`` listing their ids."""
    root = root_or_default(root)
    if not isinstance(name, str) or name.startswith("sweep-") or (root / name).is_dir():
        return name
    named = [r.run_id for r in list_runs(root) if r.name == name]
    if len(named) > 1:
        raise RunNotFound(
            f"{len(named)} runs are named {name!r}: give one run id, e.g. {', '.join(named[:3])}"
        )
    return named[0] if named else name


def delete_run(run_id: str, root: Path | None = None) -> None:
    """Remove a finished run's folder; refuse a live one."""
    shutil.rmtree(removable(run_id, root).run_dir)


def removable(run_id: str, root: Path | None = None) -> RunRecord:
    """The run's record when it may be removed; ``RunIsLive`` (naming the fix) when it runs."""
    rec = get_run(check_run_id(run_id), root)
    if rec.state in LIVE_STATES:
        raise RunIsLive(f"run {run_id} is {rec.state}: stop it first (python -m lab stop {run_id})")
    st = read_status(rec.run_dir)
    # a Slurm job, last seen
    job_live = STATE_MAP.get(str((st.slurm or {}).get("state"))) in LIVE_STATES
    if rec.state == LOST and (procs.alive(st.pid, st.pid_ct) or job_live):
        raise RunIsLive(
            f"run {run_id} is lost but its training processes still run: stop it first (python -m "
            f"lab stop {run_id})"
        )
    return rec


def run_pids(root: Path | None = None) -> dict[int, str]:
    """pid -> run_id for every pid recorded by a run that has processes (supervisor, training root,
    tree)."""
    out: dict[int, str] = {}
    for run_dir in _run_dirs(root_or_default(root)):
        st = read_status(run_dir)
        if st.state not in HAS_PROCESSES:
            continue
        for pid in (st.supervisor_pid, st.pid):
            if pid:
                out[int(pid)] = run_dir.name
        for pid, _ct in st.tree:
            out[int(pid)] = run_dir.name
    return out


def process_owner(root: Path | None = None) -> Callable[[int], str | None]:
    """``owner(pid)``: the run whose recorded process is ``pid`` or one of its ancestors, else None.

    The runs' status files are read once, on the first question: a machine
    whose GPUs run nothing never reads them.
    """
    pids: dict[int, str] | None = None

    def owner(pid: int) -> str | None:
        nonlocal pids
        if pids is None:
            pids = run_pids(root)
        return next((pids[p] for p in procs.lineage(pid) if p in pids), None)

    return owner


def gpu_users(root: Path | None = None) -> Callable[[int], tuple[str, ...]]:
    """``users(index)``: the runs with processes whose config chose physical GPU ``index``.

    For GPU processes whose pid is not visible here (a container sees NVML's
    host pids): the GPU a run chose is then the only link to it. The status
    and run files are read once, on the first question.
    """
    by_gpu: dict[int, tuple[str, ...]] | None = None

    def users(index: int) -> tuple[str, ...]:
        nonlocal by_gpu
        if by_gpu is None:
            by_gpu = {}
            for run_dir in _run_dirs(root_or_default(root)):
                if read_status(run_dir).state not in HAS_PROCESSES:
                    continue
                for g in read_run(run_dir).gpus:
                    by_gpu[int(g)] = by_gpu.get(int(g), ()) + (run_dir.name,)
        return by_gpu.get(index, ())

    return users
