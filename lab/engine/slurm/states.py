"""What a Slurm job says, in the lab's words: the commands that ask it, their answers read, its
states mapped.

Slurm's job states map to the run states of ``lab.runfolder`` (``STATE_MAP``:
PENDING -> queued, RUNNING -> running, COMPLETED -> succeeded, CANCELLED ->
stopped, FAILED / TIMEOUT / OUT_OF_MEMORY / NODE_FAIL / PREEMPTED / BOOT_FAIL /
DEADLINE -> failed); a job that is still COMPLETING keeps its processes and is
not over yet. ``pending_note`` explains a pending reason (Resources, Priority,
PartitionTimeLimit, QOSMaxGRESPerUser...) and says when the job will never
start as asked; ``end_diagnosis`` is the ``Diagnosis`` of a job Slurm ended
(TIMEOUT: ask for more time, resume from the checkpoint...); ``refused`` is
the one of a job sbatch would not take, ``unavailable`` of one it could not be
asked to take. The argv of sbatch, squeue, sacct and
scancel are built here and their output read here (``parse_squeue``,
``parse_sacct``, ``parse_job_id``); running them is ``lab.engine.slurm.cmd``'s.
Pure: tested by tests/test_slurm.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.engine.supervise.diagnose import Diagnosis
from lab.runfolder import FAILED, QUEUED, RUNNING, STARTING, STOPPED, SUCCEEDED

REFUSED = "slurm_refused"  # the diagnosis key of a job sbatch refused
UNAVAILABLE = "slurm_unavailable"  # ... of a job not submitted because Slurm could not be asked
NOT_SUBMITTED = (REFUSED, UNAVAILABLE)
STATE_MAP = {
    "PENDING": QUEUED,
    "REQUEUED": QUEUED,
    "REQUEUE_HOLD": QUEUED,
    "REQUEUE_FED": QUEUED,
    "RESV_DEL_HOLD": QUEUED,
    "CONFIGURING": STARTING,
    "RUNNING": RUNNING,
    "COMPLETING": RUNNING,
    "SUSPENDED": RUNNING,
    "STOPPED": RUNNING,
    "SIGNALING": RUNNING,
    "STAGE_OUT": RUNNING,
    "RESIZING": RUNNING,
    "COMPLETED": SUCCEEDED,
    "CANCELLED": STOPPED,
    "FAILED": FAILED,
    "TIMEOUT": FAILED,
    "OUT_OF_MEMORY": FAILED,
    "NODE_FAIL": FAILED,
    "PREEMPTED": FAILED,
    "BOOT_FAIL": FAILED,
    "DEADLINE": FAILED,
    "SPECIAL_EXIT": FAILED,
}
_ENDS = {s for s, ours in STATE_MAP.items() if ours in (SUCCEEDED, STOPPED, FAILED)}
SQUEUE_FORMAT = "%i|%T|%r|%N"


@dataclass(frozen=True)
class Job:
    """One job as Slurm reports it. ``state`` is Slurm's (``TIMEOUT``), ``nodes`` its node list as
    Slurm writes it."""

    job_id: str
    state: str
    reason: str = ""
    nodes: str = ""
    exit_code: int | None = None

    @property
    def over(self) -> bool:
        """Ended, and no process of it left: Slurm has finished cleaning up (not COMPLETING)."""
        return self.state in _ENDS

    @property
    def run_state(self) -> str | None:
        """The run state this job state means; None for a state we do not know (keep the last
        one)."""
        return STATE_MAP.get(self.state)

    def to_status(self) -> dict[str, Any]:
        """status.json's ``slurm`` object."""
        return {
            "job_id": self.job_id,
            "state": self.state,
            "reason": self.reason,
            "nodes": self.nodes,
        }


def submit_argv(script: Path | str) -> list[str]:
    """sbatch of a job script, answering with the job id alone."""
    return ["sbatch", "--parsable", str(script)]


def squeue_argv(job_id: str) -> list[str]:
    """squeue of one job in any state (a finished one stays listed for MinJobAge, 5 minutes by
    default)."""
    return ["squeue", "--noheader", "--states=all", f"--jobs={job_id}", f"--format={SQUEUE_FORMAT}"]


def sacct_argv(job_id: str) -> list[str]:
    """sacct of one job's allocation (answers only where Slurm keeps accounting)."""
    return [
        "sacct",
        "--noheader",
        "--parsable2",
        "--allocations",
        f"--jobs={job_id}",
        "--format=JobIDRaw,State,NodeList,ExitCode",
    ]


def scancel_argv(job_id: str) -> list[str]:
    return ["scancel", str(job_id)]


def parse_job_id(stdout: str) -> str:
    """The job id of ``sbatch --parsable``'s answer (``123`` or ``123;cluster``); ValueError when
    there is none."""
    first = (stdout.strip().splitlines() or [""])[0].split(";")[0].strip()
    if not first.isdigit():
        raise ValueError(f"sbatch gave no job id: {stdout.strip()[:200]!r}")
    return first


def _clean(value: str) -> str:
    return "" if value.strip() in ("(null)", "None", "(None)") else value.strip()


def parse_squeue(stdout: str, job_id: str) -> Job | None:
    """The job's line of ``squeue_argv``'s output; None when squeue does not know it (any more)."""
    for line in stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 4 and parts[0] == str(job_id):
            return Job(str(job_id), parts[1].strip().upper(), _clean(parts[2]), _clean(parts[3]))
    return None


def parse_sacct(stdout: str, job_id: str) -> Job | None:
    """The job's line of ``sacct_argv``'s output (``CANCELLED by 0`` read as CANCELLED; ExitCode
    ``1:0`` as 1)."""
    for line in stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 4 and parts[0] == str(job_id):
            code = parts[3].split(":")[0]
            return Job(
                str(job_id),
                (parts[1].split() or [""])[0].upper(),
                "",
                _clean(parts[2]),
                int(code) if code.isdigit() else None,
            )
    return None


# pending reason -> (what it means, whether the job can ever start as asked)
_PENDING: dict[str, tuple[str, bool]] = {
    "Resources": ("waiting for the nodes, GPUs or CPUs it asked for to be free", True),
    "Priority": ("other jobs come first", True),
    "Dependency": ("waiting for the jobs it depends on", True),
    "BeginTime": ("its start time has not come yet", True),
    "None": ("the scheduler has not looked at it yet", True),
    "ReqNodeNotAvail": ("a node it needs is down, drained or reserved", True),
    "QOSMaxGRESPerUser": (
        "your QOS caps the GPUs one user may hold: it starts when your other jobs end",
        True,
    ),
    "AssocGrpGRES": (
        "your account's GPU limit is reached: it starts when other jobs of the account end",
        True,
    ),
    "QOSMaxJobsPerUserLimit": ("your QOS caps how many jobs you may run at once", True),
    "JobHeldUser": ("held by you: scontrol release <job id>", True),
    "JobHeldAdmin": ("held by an administrator", True),
    "PartitionDown": ("the partition is down", True),
    "PartitionTimeLimit": (
        "the time asked is over the partition's MaxTime: ask for less time "
        "(scontrol show partition shows MaxTime)",
        False,
    ),
    "PartitionNodeLimit": (
        "more nodes than the partition allows or has: ask for fewer nodes (sinfo shows them)",
        False,
    ),
    "QOSMaxWallDurationPerJobLimit": (
        "the time asked is over your QOS's limit: ask for less time",
        False,
    ),
    "AssocMaxWallDurationLimit": (
        "the time asked is over your account's limit: ask for less time",
        False,
    ),
    "QOSMaxNodePerJobLimit": ("more nodes than your QOS allows: ask for fewer nodes", False),
    "InvalidAccount": ("the account is not one you may use: give another account", False),
    "InvalidQOS": ("the QOS is not one you may use", False),
}


def pending_note(reason: str) -> str | None:
    """Why a pending job waits, in words (and whether it will ever start as asked); None without a
    reason."""
    if not reason:
        return None
    what, can_start = _PENDING.get(reason, (None, True))
    if what is None:
        return f"Slurm holds it back ({reason}): see squeue --start or ask the cluster's admins"
    return (
        f"{what} ({reason})"
        if can_start
        else f"it will not start as asked: {what} ({reason}); stop it and launch again"
    )


# Slurm state -> (cause, fix) of a job Slurm itself ended
_ENDED_BY_SLURM: dict[str, tuple[str, str]] = {
    "TIMEOUT": (
        "Slurm ended the job at its time limit{limit} (TIMEOUT).",
        "Ask for more time (time, within the partition's MaxTime) or fewer steps; with checkpoint "
        "last "
        "the trainer saved checkpoints/last.pt at each epoch end: training.train --resume auto "
        "continues "
        "from it.",
    ),
    "OUT_OF_MEMORY": (
        "A process of the job used more memory than Slurm gave it (OUT_OF_MEMORY).",
        "Ask for more memory (sbatch_args --mem=… or --mem-per-cpu=…), or lower the batch size, "
        "image size or DataLoader workers.",
    ),
    "NODE_FAIL": (
        "A node of the job failed{nodes} (NODE_FAIL).",
        "Launch again (Slurm takes a failed node out of service); if it repeats, tell the "
        "cluster's "
        "admins which node.",
    ),
    "PREEMPTED": (
        "A job of higher priority took the job's nodes (PREEMPTED).",
        "Launch again, or use a partition or QOS without preemption (sbatch_args --requeue lets "
        "Slurm "
        "queue it again by itself).",
    ),
    "BOOT_FAIL": (
        "A node of the job failed to boot{nodes} (BOOT_FAIL).",
        "Launch again; if it repeats, tell the cluster's admins.",
    ),
    "DEADLINE": (
        "The job reached its deadline before it could end (DEADLINE).",
        "Launch again with a later --deadline (sbatch_args) or without one.",
    ),
}


def end_diagnosis(job: Job, time_limit: str = "") -> Diagnosis | None:
    """The diagnosis of a job Slurm ended (TIMEOUT, OUT_OF_MEMORY, NODE_FAIL...); None for other
    states."""
    if job.state not in _ENDED_BY_SLURM:
        return None
    cause, fix = _ENDED_BY_SLURM[job.state]
    cause = cause.format(
        limit=f" (time {time_limit})" if time_limit else "",
        nodes=f" ({job.nodes})" if job.nodes else "",
    )
    return Diagnosis(f"slurm_{job.state.lower()}", cause, fix, exit_code=job.exit_code)


def job_failed(job: Job) -> Diagnosis:
    """A job Slurm says FAILED whose logs name nothing known: its exit code, and where to read
    why."""
    code = f" with exit code {job.exit_code}" if job.exit_code is not None else ""
    return Diagnosis(
        "slurm_failed",
        f"The job's script exited{code} (Slurm: {job.state}).",
        "Read the end of stdout.log (python -m lab logs RUN) and fix the error it names.",
        exit_code=job.exit_code,
    )


def refused(message: str) -> Diagnosis:
    """sbatch would not take the job: its own words, and what usually fixes them."""
    msg = " ".join(message.split()).rstrip(".") or "no reason given"
    return Diagnosis(
        REFUSED,
        f"Slurm refused the job: {msg}.",
        "Ask for what the partition has (sinfo; scontrol show partition): fewer nodes, GPUs or "
        "CPUs, "
        "less time, another partition or account.",
    )


def unavailable(message: str) -> Diagnosis:
    """Slurm could not be asked to take the job (no sbatch here, no controller answering)."""
    return Diagnosis(
        UNAVAILABLE,
        f"Slurm could not be asked to take the job: {message}",
        "Run the lab where Slurm's commands work (a login node) and its controller answers "
        "(scontrol ping), then launch again.",
    )


def gone(job_id: str) -> Diagnosis:
    """A job Slurm forgot without the job recording its end (the run is lost): what is known, where
    to look."""
    return Diagnosis(
        "slurm_gone",
        f"Slurm no longer knows job {job_id} and the job recorded no end (no "
        "job_exit.json): it ended while nobody watched, or was removed.",
        "Read the end of stdout.log (python -m lab logs RUN); launch it again (with checkpoint "
        "last, "
        "training.train --resume auto continues from checkpoints/last.pt).",
    )
