"""The gateway to Slurm: the only module that runs its commands (sbatch, squeue, sacct, scancel).

Each call runs one command with a time limit, in this process's environment
(``SLURM_CONF`` and PATH say which cluster), and turns what goes wrong into a
``SlurmError`` whose message names the fix: a command missing from PATH, a
controller that does not answer, a job sbatch refuses (its own words). Reading
their answers is ``lab.engine.slurm.states``'s.
``job`` asks squeue first and sacct where squeue has forgotten the job (sacct
answers only on clusters that keep accounting).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from lab.engine import spawn
from lab.engine.slurm.states import SQUEUE_FORMAT, Job, parse_job_id, parse_sacct, parse_squeue

log = logging.getLogger(__name__)
TIMEOUT_S = 30.0  # a busy controller answers in seconds; one that does not is down
# under the launcher's 30 s wait for the watcher: a hung sbatch is reported, not killed
SUBMIT_TIMEOUT_S = 20.0


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


class SlurmError(RuntimeError):
    """A Slurm command failed; the message says what Slurm said and what to do."""


class SlurmUnavailable(SlurmError):
    """Slurm could not be asked at all: its command is not on PATH, or it did not answer in time."""


def _run(
    argv: list[str], cwd: Path | str | None = None, timeout: float = TIMEOUT_S
) -> spawn.CompletedProcess:
    try:
        return spawn.run(argv, cwd=cwd, timeout=timeout)
    except FileNotFoundError:
        raise SlurmUnavailable(
            f"{argv[0]} is not on PATH: run the lab where Slurm's commands work (a login "
            "node), or install Slurm's client"
        ) from None
    except spawn.TimeoutExpired:
        raise SlurmUnavailable(
            f"{argv[0]} did not answer within {timeout:.0f} s: is slurmctld up? (scontrol ping)"
        ) from None


def _said(p: spawn.CompletedProcess) -> str:
    """What a failed command said, one line: its lines joined with "; ", without the "sbatch: error:
    " prefixes."""
    lines = [ln.strip() for ln in (p.stderr or p.stdout or "").splitlines() if ln.strip()]
    lines = [re.sub(r"^\w+: (error|fatal): ", "", ln) for ln in lines]
    return "; ".join(dict.fromkeys(lines))[:500] or f"exit code {p.returncode}"


def submit(script: Path | str, cwd: Path | str | None = None) -> str:
    """Submit a job script; its job id. ``SlurmError`` (sbatch's own words) when it is refused,
    ``SlurmUnavailable`` when sbatch is missing or does not answer."""
    p = _run(submit_argv(script), cwd=cwd, timeout=SUBMIT_TIMEOUT_S)
    if p.returncode != 0:
        raise SlurmError(_said(p))
    try:
        return parse_job_id(p.stdout)
    except ValueError as e:
        raise SlurmError(str(e)) from None


def local_pids(job_id: str) -> list[int]:
    """The job's processes on this machine (``scontrol listpids``: the batch script and what it
    started); [] where it runs on other nodes only, or scontrol cannot say."""
    try:
        p = _run(["scontrol", "listpids", str(job_id)])
    except SlurmUnavailable:
        return []
    if p.returncode != 0:
        return []
    pids = []
    for line in p.stdout.splitlines()[1:]:  # PID JOBID STEPID LOCALID GLOBALID
        first = line.split()[:1]
        if first and first[0].isdigit():
            pids.append(int(first[0]))
    return sorted(set(pids))


def job(job_id: str) -> Job | None:
    """The job as squeue (else sacct) reports it; None when neither knows it. ``SlurmError`` when
    squeue fails."""
    p = _run(squeue_argv(job_id))
    found = parse_squeue(p.stdout, job_id) if p.returncode == 0 else None
    if found is not None:
        return found
    if p.returncode != 0 and "Invalid job id" not in (p.stderr or ""):
        raise SlurmError(f"squeue failed: {_said(p)}")
    try:
        acct = _run(sacct_argv(job_id))
    except SlurmError:  # no sacct on PATH: no accounting to ask
        return None
    return parse_sacct(acct.stdout, job_id) if acct.returncode == 0 else None


def cancel(job_id: str) -> None:
    """scancel the job (every step on every node); ``SlurmError`` when scancel fails."""
    p = _run(scancel_argv(job_id))
    if p.returncode != 0:
        raise SlurmError(f"scancel {job_id} failed: {_said(p)}")


def cancel_quietly(job_id: str) -> bool:
    """``cancel``, logging rather than raising (for clean-ups); whether scancel took it."""
    try:
        cancel(job_id)
        return True
    except SlurmError as e:
        log.warning("%s", e)
        return False
