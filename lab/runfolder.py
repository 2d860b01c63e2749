"""The run folder: where runs live, what their files are called, the run states, time stamps, atomic
JSON.

The contract between ``training/`` (and a user's own script) and ``lab/``
(docs/contracts.md section 2). Each fact is written here once: the runs root
(``./runs`` unless ``LAB_RUNS_DIR`` names another folder), the file and
folder names inside a run folder, the run states and their groups, the run
kinds (the lab's trainer or a user's script), the ISO
time format of run.json/status.json, and how those files are read (a torn
or missing file is "not there yet") and written (temp file, then rename).
It also knows the repository's own folders (sample data).
"""

from __future__ import annotations

import os
import re
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLE_DATA = REPO_ROOT / "sample_data"
SAMPLE_RUNS = SAMPLE_DATA / "runs"
DIGITS = SAMPLE_DATA / "digits"

# ---- names inside a run folder --------------------------------------------
RUN_JSON = "run.json"  # launcher: what was asked
STATUS_JSON = "status.json"  # supervisor: the state machine
SUMMARY_JSON = "summary.json"  # trainer, at the end
PROGRESS_JSON = "progress.json"  # trainer, every log window
STOP_REQUEST = "stop.request"  # launcher -> supervisor: please stop
STACKS_REQUEST = "stacks.request"  # a page or the CLI -> supervisor: dump every rank's stack now
STDOUT_LOG = "stdout.log"  # supervisor: the training command's combined output
SUPERVISOR_LOG = "supervisor.log"
ADOPT_LOCK = "adopt.lock"  # held by the watcher that adopted a run whose supervisor died
ADOPT_LOG = "adopt.log"  # that watcher's output
ERROR_JSON = "error.json"  # TORCHELASTIC_ERROR_FILE
TB_DIR = "tb"  # trainer's event files (rank 0)
SYS_DIR = "sys"  # supervisor's device samples as event files
LOGS_DIR = "logs"  # torchrun --log-dir: logs/<attempt>/<rank>/{stdout,stderr}.log
CHECKPOINTS_DIR = "checkpoints"
# trainer: the newest checkpoint, what a resume starts from
LAST_CHECKPOINT = f"{CHECKPOINTS_DIR}/last.pt"
# an fsdp run's sharded checkpoint (training.sharded_checkpoint): whole once DCP's index and the
# trainer's record are both in it
SHARDED_CHECKPOINT = f"{CHECKPOINTS_DIR}/last.dcp"
SHARDED_CHECKPOINT_FILES = (".metadata", "trainer.json")
# trainer, with --profile-steps: trace_rank<i>.json.gz and breakdown.json
PROFILE_DIR = "profile"
BREAKDOWN_JSON = f"{PROFILE_DIR}/breakdown.json"
# supervisor: rank<i>-<YYYYmmdd-HHMMSS>.txt, every rank's stack when stalled or asked
STACKS_DIR = "stacks"
# supervisor: health/<key> = 1 events at the optimizer step a finding was made
HEALTH_DIR = "health"
SWEEPS_DIR = ".sweeps"  # in the runs root: <sweep_id>.json and .log
# in the runs root: <id>.json of each link check (lab.engine.linkcheck) and its .log; not a run
LINKCHECKS_DIR = "linkchecks"
# launcher, a Slurm run: the job script, readable and submittable by hand
JOB_SBATCH = "job.sbatch"
# a Slurm job script's last lines: {"exit_code", "ended_at"} (none if killed)
JOB_EXIT = "job_exit.json"
# launcher: the pre-flight's lines and what they lead to expect (lab.engine.preflight.expectations)
PREFLIGHT = "preflight.json"

# ---- run states ------------------------------------------------------------
QUEUED, STARTING, RUNNING = "queued", "starting", "running"
SUCCEEDED, FAILED, STOPPED, LOST = "succeeded", "failed", "stopped", "lost"
STATES = (QUEUED, STARTING, RUNNING, SUCCEEDED, FAILED, STOPPED, LOST)
LIVE_STATES = (QUEUED, STARTING, RUNNING)  # says it has (or will have) processes
HAS_PROCESSES = (STARTING, RUNNING)  # pids recorded and meant to be alive
ENDED_STATES = (SUCCEEDED, FAILED, STOPPED)  # the supervisor recorded an end
FINAL_STATES = ENDED_STATES + (LOST,)  # nothing more will happen
# a run folder whose run.json, status.json, summary.json or progress.json is empty, truncated or
# not a JSON object (lab.engine.registry lists it so, naming the files); not a state any writer
# records, so not in STATES
UNREADABLE = "unreadable"
RUN_FILES = (STATUS_JSON, RUN_JSON, SUMMARY_JSON, PROGRESS_JSON)


# ---- run kinds (run.json and status.json ``kind``) -------------------------
# the lab's trainer; a user's own script (lab.engine.launch.script)
TRAINER, SCRIPT = "trainer", "script"
KINDS = (TRAINER, SCRIPT)


def is_live(state: str | None) -> bool:
    return state in LIVE_STATES


def is_final(state: str | None) -> bool:
    return state in FINAL_STATES


_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class BadRunId(ValueError):
    """A run id that could escape the runs folder or is not one of ours."""


# the repository's runs/ folder, wherever the lab is started from (the installed `lab` too)
DEFAULT_RUNS = Path(__file__).resolve().parent.parent / "runs"


def runs_dir() -> Path:
    """The runs folder: ``$LAB_RUNS_DIR``, else the repository's ``runs/``, resolved."""
    return root_or_default(None)


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


def root_or_default(root: Path | str | None) -> Path:
    """``root`` resolved, or the runs folder (``$LAB_RUNS_DIR`` or the repository's ``runs/``) when
    None.

    The one place the runs root is resolved: every function taking
    ``runs_dir=``/``root=`` passes it through here.
    """
    return Path(root or os.environ.get("LAB_RUNS_DIR") or DEFAULT_RUNS).expanduser().resolve()


def now_iso() -> str:
    """Now, UTC, ISO 8601 to the second: the timestamps of run.json and status.json."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def stamp() -> str:
    """Now, UTC, as ``YYYYmmdd-HHMMSS``: the time part of run and sweep ids and export file
    names."""
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


def parse_time(value: Any) -> datetime | None:
    """An ISO string (ours, or with a ``Z``) or epoch seconds as an aware datetime; anything else
    None."""
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        if isinstance(value, (int, float)):
            return datetime.fromtimestamp(float(value), tz=timezone.utc)
        dt = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except (ValueError, OverflowError, OSError):
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def age_s(value: Any) -> float | None:
    """Seconds since ``value`` (see ``parse_time``); None when it is not a time."""
    dt = parse_time(value)
    return None if dt is None else (datetime.now(timezone.utc) - dt).total_seconds()


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


# A file read less than this after its last change is not remembered: file times move in coarse
# ticks, so a second write within the tick could leave inode, mtime and size as they were.
SETTLED_NS = 2_000_000_000
_MEMO_MAX = 50_000  # about 12 files a run for 4,000 runs
_memo: dict[str, tuple[tuple[int, int, int], dict | None]] = {}
_memo_lock = threading.Lock()


def read_json_kept(path: Path | str) -> dict | None:
    """``read_json``, remembered while the file keeps its inode, mtime and size: listing 1,000 runs
    a second time re-reads only the files that changed (one ``stat`` each for the rest).

    The object returned is shared with later calls: read it, never change it. Our writers replace
    files (a new inode), so a rewrite is always seen.
    """
    key = os.fspath(path)
    try:
        s = os.stat(key)
    except OSError:
        with _memo_lock:
            _memo.pop(key, None)
        return None
    sig = (s.st_ino, s.st_mtime_ns, s.st_size)
    with _memo_lock:
        hit = _memo.get(key)
    if hit is not None and hit[0] == sig:
        return hit[1]
    data = read_json(Path(key))
    if time.time_ns() - s.st_mtime_ns > SETTLED_NS:
        with _memo_lock:
            if len(_memo) >= _MEMO_MAX:
                _memo.pop(next(iter(_memo)))  # the oldest entry
            _memo[key] = (sig, data)
    return data


def settled_signature(folder: str, names: tuple[str, ...]) -> tuple | None:
    """``(inode, mtime, size)`` of each of ``names`` in ``folder`` (None for a missing one), or None
    when any of them changed within ``SETTLED_NS``: what a memory of the folder is checked against.
    """
    out: list[tuple[int, int, int] | None] = []
    settled = time.time_ns() - SETTLED_NS
    for name in names:
        try:
            s = os.stat(os.path.join(folder, name))
        except OSError:
            out.append(None)
            continue
        if s.st_mtime_ns > settled:
            return None
        out.append((s.st_ino, s.st_mtime_ns, s.st_size))
    return tuple(out)


def write_json_atomic(path: Path, data: dict) -> None:
    """Write ``data`` to ``path`` via a temp file and ``os.replace`` so readers never see half of
    it."""
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


def damaged_files(run_dir: Path) -> list[str]:
    """The names among ``RUN_FILES`` that are in ``run_dir`` but empty, truncated or not a JSON
    object. Each is read twice: our writers replace files atomically, so a file that fails both
    reads is damaged, not being written."""
    out = []
    for name in RUN_FILES:
        path = Path(run_dir) / name
        # a whole file seen before answers from memory; a damaged one is read again, fresh
        if read_json_kept(path) is None and path.is_file() and read_json(path) is None:
            out.append(name)
    return out


def is_checkpoint(path: Path) -> bool:
    """Whether ``--resume`` can read ``path``: a file (``last.pt``; the trainer checks its
    contents) or a whole sharded checkpoint folder (``last.dcp``), of any mode: the trainer
    moves both between single, dp, ddp and fsdp."""
    if path.is_dir():
        return all((path / name).is_file() for name in SHARDED_CHECKPOINT_FILES)
    return path.is_file()
