"""How a Slurm job ended, as a run's diagnosis: the states Slurm itself ends a job in (TIMEOUT: ask
for more time and resume from the checkpoint; OUT_OF_MEMORY; NODE_FAIL ...), a failed job script,
a job sbatch refused or could not be asked to take, a job Slurm forgot."""

from __future__ import annotations

from lab.engine.slurm.states import Job
from lab.engine.spec.diagnosis import Diagnosis

REFUSED = "slurm_refused"  # the diagnosis key of a job sbatch refused
UNAVAILABLE = "slurm_unavailable"  # ... of a job not submitted because Slurm could not be asked
NOT_SUBMITTED = (REFUSED, UNAVAILABLE)

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
