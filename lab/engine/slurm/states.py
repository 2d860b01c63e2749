"""What a Slurm job says, in the lab's words: its states mapped to the run states, squeue's and
sacct's answers read (``parse_squeue``, ``parse_sacct``, ``parse_job_id``), and why a pending job
waits (``pending_note``). Slurm's states: PENDING -> queued, RUNNING -> running, COMPLETED ->
succeeded, CANCELLED -> stopped, FAILED / TIMEOUT / OUT_OF_MEMORY / NODE_FAIL / PREEMPTED /
BOOT_FAIL / DEADLINE -> failed; a COMPLETING job keeps its processes and is not over yet."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.runfolder import FAILED, QUEUED, RUNNING, STARTING, STOPPED, SUCCEEDED

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
