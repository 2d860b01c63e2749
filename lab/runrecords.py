"""The run folder's records as typed values: run.json (``RunFile``, the launcher's), status.json
(``StatusFile``, the supervisor's), summary.json (``SummaryFile``, the trainer's), and the one
reader of each (``read_run``, ``read_status``, ``read_summary``; progress.json's ``read_progress``),
each over one parser of the object read (``run_file``, ``status_file``, ``summary_file``: also for
an object the registry made, ``registry.status_record``).

A reader never raises on what it finds: a missing, half-written or non-object file is a record
with ``found`` False and every field at its empty value, and a field of the wrong type (a damaged
or older file) reads as absent, as the dict readers before these did with ``.get(...) or {}``.
``data`` keeps the whole object as read (``{}`` when not found), for the keys no field names and
for writers that merge into it; the files' keys and their writers are docs/contracts.md's and
unchanged (run.json: ``lab.engine.launch.newrun``, status.json: ``lab.engine.supervise.status``,
summary.json: the trainer, which never imports ``lab``). ``kept=True`` reads through
``runfolder.read_json_kept`` (a listing's: unchanged files are not read again); its ``data`` is
shared with later reads: read it, never change it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.runfolder import (
    PROGRESS_JSON,
    RUN_JSON,
    STATUS_JSON,
    SUMMARY_JSON,
    read_json,
    read_json_kept,
)

_RECORDS = (STATUS_JSON, RUN_JSON, SUMMARY_JSON)


def _object(folder: Path | str, name: str, kept: bool) -> dict | None:
    path = Path(folder) / name
    return read_json_kept(path) if kept else read_json(path)


def _dict(value: Any) -> dict | None:
    return value if isinstance(value, dict) else None


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


@dataclass(frozen=True)
class RunFile:
    """run.json: what was asked (the launcher's record, docs/contracts.md "run.json")."""

    found: bool = False
    data: dict[str, Any] = field(default_factory=dict)
    name: str = ""  # "" when none was given
    config: dict | None = None  # the RunConfig as dict; None when absent or not an object
    env: dict = field(default_factory=dict)  # only the variables the launcher set
    created_at: Any = None
    host: Any = None
    recorded_on: Any = None
    sweep_id: Any = None
    kind: Any = None  # "script" for a user's script; absent (a trainer run) reads None
    cwd: Any = None
    resumed_from: Any = None
    scaling: Any = None
    varied: dict | None = None  # a knob sweep's run: the varied options' values
    exclusive: bool = False
    wait_for_idle: bool = False

    @property
    def gpus(self) -> list:
        """The physical GPUs its config chose (``[]`` without any)."""
        return list((self.config or {}).get("gpus") or [])


def read_run(run_dir: Path | str, *, kept: bool = False) -> RunFile:
    """run.json of ``run_dir`` (a record with ``found`` False when missing or torn)."""
    return run_file(_object(run_dir, RUN_JSON, kept))


def run_file(d: dict | None) -> RunFile:
    """A run.json object as its record (None, or not an object: not found)."""
    if not isinstance(d, dict):
        return RunFile()
    return RunFile(
        found=True,
        data=d,
        name=str(d.get("name") or ""),
        config=_dict(d.get("config")),
        env=_dict(d.get("env")) or {},
        created_at=d.get("created_at"),
        host=d.get("host"),
        recorded_on=d.get("recorded_on"),
        sweep_id=d.get("sweep_id"),
        kind=d.get("kind"),
        cwd=d.get("cwd"),
        resumed_from=d.get("resumed_from"),
        scaling=d.get("scaling"),
        varied=_dict(d.get("varied")),
        exclusive=bool(d.get("exclusive")),
        wait_for_idle=bool(d.get("wait_for_idle")),
    )


@dataclass(frozen=True)
class StatusFile:
    """status.json: the run's state machine (its watcher's record, docs/contracts.md
    "status.json"). ``state`` is None when the file is missing: what that means (queued, lost, …)
    is the registry's to say."""

    found: bool = False
    data: dict[str, Any] = field(default_factory=dict)
    state: Any = None
    updated_at: Any = None
    supervisor_pid: Any = None
    supervisor_ct: Any = None
    pid: Any = None  # the training command's root
    pid_ct: Any = None
    tree: list = field(default_factory=list)  # [[pid, create time], …] of every member seen
    exit_code: Any = None
    diagnosis: dict | None = None
    kind: Any = None
    events_dirs: list | None = None  # None: a run from before they were recorded
    health: list = field(default_factory=list)
    restarts: list = field(default_factory=list)
    slurm: dict | None = None  # a Slurm run's job as its watcher last saw it
    resumed_from: Any = None
    started_at: Any = None
    ended_at: Any = None
    interference: dict | None = None
    train_processes: Any = None
    script_step: Any = None
    queue: dict | None = None  # its place in the queue while it waits: {"position", "waiting_for"}
    watcher: dict | None = None  # after an adoption: {"pid", "adopted_at"}
    stacks: dict | None = None  # the last stacks taken: {"at", "files", "notes"}
    lost_reason: Any = None  # the registry's, never written: why it says ``lost``


def read_status(run_dir: Path | str, *, kept: bool = False) -> StatusFile:
    """status.json of ``run_dir`` (a record with ``found`` False when missing or torn)."""
    return status_file(_object(run_dir, STATUS_JSON, kept))


def status_file(d: dict | None) -> StatusFile:
    """A status.json object as its record (None, or not an object: not found); also the
    registry's status, with the state a folder without one implies, or ``lost``."""
    if not isinstance(d, dict):
        return StatusFile()
    events_dirs = d.get("events_dirs")
    return StatusFile(
        found=True,
        data=d,
        state=d.get("state"),
        updated_at=d.get("updated_at"),
        supervisor_pid=d.get("supervisor_pid"),
        supervisor_ct=d.get("supervisor_ct"),
        pid=d.get("pid"),
        pid_ct=d.get("pid_ct"),
        tree=_list(d.get("tree")),
        exit_code=d.get("exit_code"),
        diagnosis=_dict(d.get("diagnosis")),
        kind=d.get("kind"),
        events_dirs=events_dirs if isinstance(events_dirs, list) else None,
        health=_list(d.get("health")),
        restarts=_list(d.get("restarts")),
        slurm=_dict(d.get("slurm")),
        resumed_from=d.get("resumed_from"),
        started_at=d.get("started_at"),
        ended_at=d.get("ended_at"),
        interference=_dict(d.get("interference")),
        train_processes=d.get("train_processes"),
        script_step=d.get("script_step"),
        queue=_dict(d.get("queue")),
        watcher=_dict(d.get("watcher")),
        stacks=_dict(d.get("stacks")),
        lost_reason=d.get("lost_reason"),
    )


@dataclass(frozen=True)
class SummaryFile:
    """summary.json: the trainer's final figures (written by ``training/``, at the end)."""

    found: bool = False
    data: dict[str, Any] = field(default_factory=dict)
    completed: bool = False
    config: dict | None = None  # what ran (the trainer's own view of its options)
    mode: Any = None  # as asked
    effective_mode: Any = None  # as it ran (DP on one device runs as single)
    effective_mode_reason: Any = None
    started_at: Any = None
    hostname: Any = None

    @property
    def throughput_samples_per_sec(self) -> float | None:
        """The steady throughput: ``throughput.median`` (older files: the flat figure), a positive
        number or None."""
        steady = (_dict(self.data.get("throughput")) or {}).get("median")
        value = steady if steady is not None else self.data.get("steady_throughput_samples_per_sec")
        return float(value) if isinstance(value, (int, float)) and value > 0 else None


def read_summary(run_dir: Path | str, *, kept: bool = False) -> SummaryFile:
    """summary.json of ``run_dir`` (a record with ``found`` False when missing or torn)."""
    return summary_file(_object(run_dir, SUMMARY_JSON, kept))


def summary_file(d: dict | None) -> SummaryFile:
    """A summary.json object as its record (None, or not an object: not found)."""
    if not isinstance(d, dict):
        return SummaryFile()
    return SummaryFile(
        found=True,
        data=d,
        completed=bool(d.get("completed")),
        config=_dict(d.get("config")),
        mode=d.get("mode"),
        effective_mode=d.get("effective_mode"),
        effective_mode_reason=d.get("effective_mode_reason"),
        started_at=d.get("started_at"),
        hostname=d.get("hostname"),
    )


def read_progress(run_dir: Path | str, *, kept: bool = False) -> dict | None:
    """progress.json of ``run_dir`` (the trainer's step, total and ETA), None when missing or torn:
    shown as the trainer wrote it, so left a dict."""
    return _object(run_dir, PROGRESS_JSON, kept)


def holds_run_files(folder: Path | str) -> bool:
    """Whether ``folder`` holds a whole status.json, run.json or summary.json: a lab run folder
    (or a trainer's made by hand)."""
    return any(_object(folder, name, True) is not None for name in _RECORDS)
