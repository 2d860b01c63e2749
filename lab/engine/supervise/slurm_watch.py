"""The Slurm job as a source of the supervisor's one watch loop: it submits the run's job.sbatch,
follows the job to its end, and stops it.

The supervisor (``python -m lab.engine.supervise.supervisor RUN_DIR``, started detached by the
launcher) runs the ``submit`` watch (``submit_and_follow``) for a run whose backend is slurm, so
the job is watched without the dashboard. It submits through ``lab.engine.slurm.cmd`` (a refusal
is recorded ``failed`` with sbatch's words, key ``slurm_refused``, or ``slurm_unavailable`` when
Slurm cannot be asked; the launcher raises both), then the one loop (``lab.engine.supervise.watch``)
follows ``SlurmJob``: it asks Slurm every poll (``LAB_SLURM_POLL_S``, 2 s by default) and keeps
status.json's ``state`` and ``slurm`` (``job_id``, Slurm's ``state``, pending ``reason``,
``nodes``) up to date. A ``stop.request`` (or SIGTERM) is ``scancel``; the run is over once Slurm
has cleaned the job up (not COMPLETING); a job that does not end within ``STOP_WAIT_S`` of the stop
(Slurm unreachable) is left to Slurm and the watcher exits (the run then reads ``lost``). Its end:
COMPLETED succeeded, CANCELLED stopped, FAILED failed with the logs' diagnosis, TIMEOUT and the
other ends Slurm causes failed with theirs (``lab.engine.slurm.states``). A job Slurm forgot is
read from the job's own ``job_exit.json``; without one the run is recorded ``lost``. A waiting
run whose watcher died gets the ``follow`` watch (``follow_submitted``, the backend's
``rewatch``): the job recorded in status.json is followed, never submitted again. Like the local
supervisor it is status.json's only writer for its run; it records ``kind`` and ``events_dirs``
as the local supervisor does (``lab.engine.supervise.linked``: a user's script's event folders
below its working directory, scanned every poll and once at the end; the job's processes run on
the nodes, so any event file created there after the submission counts)."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from lab.engine import procs
from lab.engine.slurm import cmd as slurm_cmd
from lab.engine.slurm.diagnoses import end_diagnosis, gone, job_failed, refused, unavailable
from lab.engine.slurm.states import Job
from lab.engine.spec.backends import SLURM
from lab.engine.spec.diagnosis import supervisor_failure
from lab.engine.supervise.diagnose import diagnose, named
from lab.engine.supervise.watch import RunWatch, stop_request
from lab.runfolder import (
    FAILED,
    JOB_EXIT,
    JOB_SBATCH,
    LOST,
    QUEUED,
    RUNNING,
    STOPPED,
    SUCCEEDED,
    now_iso,
    read_json,
)

log = logging.getLogger("lab.engine.supervise.slurm_watch")
# after a stop, how long the job may take to end before the watcher leaves it to Slurm
STOP_WAIT_S = 120.0
# polls in a row that do not find the job before it counts as gone (one answer may be torn)
GONE_AFTER = 3
ABANDONED, GONE = "abandoned", "gone"  # ends of a job that Slurm does not say


class SlurmJob:
    """A submitted job as the one loop (``lab.engine.supervise.watch``) follows it: Slurm is
    asked at most every ``poll_s``; a stop is ``scancel`` (asked again at each poll until Slurm
    takes it), and the run is over once Slurm has cleaned the job up. Its end is the ended
    ``Job``, ``GONE`` (Slurm forgot it) or ``ABANDONED`` (no end within ``STOP_WAIT_S`` of the
    stop)."""

    here = False  # its processes are the nodes': they sample themselves (node_sampler)

    def __init__(self, job_id: str, poll_s: float, show: Callable[[Job], None]) -> None:
        self.job_id, self.every_s, self.show = job_id, poll_s, show
        self.job: Job | None = None
        self.cancelled = False
        self._asked_at: float | None = None
        self._next = 0.0
        self._misses = 0

    def poll(self) -> Job | str | None:
        if time.monotonic() < self._next:
            return None
        self._next = time.monotonic() + self.every_s
        if self._asked_at is not None and not self.cancelled:
            self.cancelled = slurm_cmd.cancel_quietly(self.job_id)
        # Slurm unreachable: the run reads lost
        if self._asked_at is not None and time.monotonic() - self._asked_at > STOP_WAIT_S:
            log.error(
                "job %s did not end within %.0f s of the stop; leaving it to Slurm",
                self.job_id,
                STOP_WAIT_S,
            )
            return ABANDONED
        try:
            job = slurm_cmd.job(self.job_id)
        except slurm_cmd.SlurmError as e:  # a controller restarting: ask again at the next poll
            log.warning("%s", e)
            return None
        self._misses = self._misses + 1 if job is None else 0
        if self._misses >= GONE_AFTER:
            return GONE
        if job is None:
            return None
        # an ended job's state is written once, with its diagnosis: a reader never sees "failed"
        # without why (a test on the cluster read TIMEOUT with no diagnosis)
        if job.over:
            return job
        if job != self.job:
            self.show(job)
            self.job = job
        return None

    def members(self, known: list[list[float]]) -> list[list[float]]:
        return known  # none here to end: Slurm ends the job's every step

    def stop(self, grace_s: float, members: list[list[float]]) -> None:
        log.info("stop asked: scancel %s", self.job_id)
        self._asked_at = time.monotonic()
        self.cancelled = slurm_cmd.cancel_quietly(self.job_id)
        return None  # over once Slurm says so

    def look(self) -> tuple[int, list[procs.Process], bool | None] | None:
        """The health watch's look: the job's processes here (none when its nodes are others:
        then it is alive as long as Slurm says it runs, and a stall has no stacks)."""
        if self.job is None or self.job.run_state != RUNNING:
            return None
        pids = set(slurm_cmd.local_pids(self.job_id))
        tops = [p for p in sorted(pids) if not set(procs.lineage(p)[1:2]) & pids]
        # what a local supervisor's child is: the trainer, torchrun or the script, not the batch
        # shell, nor the lab's node sampler (each srun step is a tree of its own)
        every = [q.pid for t in tops for q in procs.tree(t)]
        top = next((q for q in every if runs_the_run(procs.cmdline(q))), 0)
        return top, procs.tree(top) if top else [], True


class SlurmWatch:
    """One Slurm run, from its submission (or a watcher that died) to its end."""

    def __init__(self, run_dir: Path, poll_s: float) -> None:
        self.run_dir = run_dir
        self.poll_s = poll_s
        # the one loop's watch: events_dirs as the local supervisor links them (the job's pids
        # are the nodes', so none filter), and the same health watch as a local run's: stalled
        # (with the stacks of the job's processes on this machine), NaN, memory and the rest
        self.w = RunWatch(run_dir, poll_s)
        self.config = self.w.run.get("config") or {}
        self.status = self.w.status
        self.me = dict(
            supervisor_pid=self.w.me[0],
            supervisor_ct=self.w.me[1],
            backend=SLURM,
            kind=self.w.linker.kind,
            events_dirs=self.w.linker.dirs,
        )

    def submit(self) -> str | None:
        """sbatch the job script; its job id, or None when there is nothing to follow (refused, or
        stopped first)."""
        if stop_request(self.run_dir) is not None:
            self.status.update(state=STOPPED, ended_at=now_iso(), **self.me)
            return None
        try:
            job_id = slurm_cmd.submit(self.run_dir / JOB_SBATCH, cwd=self.run_dir)
        except slurm_cmd.SlurmError as e:
            log.error("the job was not submitted: %s", e)
            d = (
                unavailable(str(e))
                if isinstance(e, slurm_cmd.SlurmUnavailable)
                else refused(str(e))
            )
            self.status.update(state=FAILED, ended_at=now_iso(), diagnosis=d.to_dict(), **self.me)
            return None
        log.info("submitted job %s", job_id)
        self.status.update(
            state=QUEUED,
            slurm=Job(job_id, "PENDING").to_status(),
            submitted_at=now_iso(),
            **self.me,
        )
        return job_id

    def submitted(self) -> str | None:
        """The job a watcher that died submitted (status.json's), now this watcher's to follow;
        None (the run recorded failed) when it died before recording one."""
        job_id = (self.status.data.get("slurm") or {}).get("job_id")
        if job_id:
            self.status.update(**self.me)
            log.info("following job %s, submitted by a watcher that died", job_id)
            return str(job_id)
        d = supervisor_failure(
            "the Slurm watcher died before it recorded its job's id",
            f"squeue --name lab-{self.run_dir.name} shows the job, if any; scancel it, then "
            "launch again",
        )
        self.status.update(state=FAILED, ended_at=now_iso(), diagnosis=d.to_dict(), **self.me)
        return None

    def follow(self, job_id: str) -> str:
        """Follow the job until it is over (cancelling it when asked); record and return the run's
        end."""
        source = SlurmJob(job_id, self.poll_s, self._show)
        end, _req = self.w.watch(source)
        if end == ABANDONED:
            return "error"
        if end == GONE:
            return self._gone(job_id, source.cancelled)
        return self._finish(end)

    def _show(self, job: Job) -> None:
        fields = dict(slurm=job.to_status())
        if job.run_state:
            fields["state"] = job.run_state
        if job.run_state == RUNNING and not self.status.data.get("started_at"):
            fields["started_at"] = now_iso()
        self.status.update(**fields)

    def _exit_code(self, job: Job) -> int | None:
        recorded = read_json(self.run_dir / JOB_EXIT) or {}
        code = recorded.get("exit_code")
        return code if isinstance(code, int) else job.exit_code

    def _finish(self, job: Job) -> str:
        rc = self._exit_code(job)
        job = Job(job.job_id, job.state, job.reason, job.nodes, rc)
        # the job's own record of a clean exit wins: Slurm may end a job (time limit, scancel) while
        # its script is already writing it, after the work is done
        state = (
            SUCCEEDED if rc == 0 and (self.run_dir / JOB_EXIT).exists() else job.run_state or FAILED
        )
        diag = None
        if state == FAILED:
            diag = (
                end_diagnosis(job, str(self.config.get("time") or ""))
                or diagnose(self.run_dir, rc)
                or job_failed(job)
            )
            diag = replace(diag, fix=named(diag.fix, self.run_dir.name))  # lab logs <this run>
        self.w.record_end(state, diag, exit_code=rc, slurm=job.to_status())
        log.info("job %s: %s -> %s (exit %s)", job.job_id, job.state, state, rc)
        return state

    def _gone(self, job_id: str, cancelled: bool) -> str:
        """Slurm no longer knows the job: its own record of its end decides, else it is lost."""
        recorded = read_json(self.run_dir / JOB_EXIT)
        if recorded is not None:
            rc = recorded.get("exit_code")
            return self._finish(Job(job_id, "COMPLETED" if rc == 0 else "FAILED", "", "", rc))
        if cancelled:
            self.w.record_end(STOPPED, None)
            return STOPPED
        d = gone(job_id)
        d = replace(d, fix=named(d.fix, self.run_dir.name))
        self.status.update(state=LOST, lost_reason=d.cause, diagnosis=d.to_dict())
        log.warning("%s", d.cause)
        return LOST


def runs_the_run(argv: list[str]) -> bool:
    """Whether a job's process is the run itself (Python: the trainer, torchrun or the user's
    script), not a shell or the lab's node sampler."""
    line = " ".join(argv)
    python = bool(argv) and ("python" in os.path.basename(argv[0]) or "torchrun" in line)
    return python and "lab.engine.slurm.node_sampler" not in line


def poll_s() -> float:
    """Seconds between questions to Slurm (``LAB_SLURM_POLL_S``, 2 by default)."""
    return float(os.environ.get("LAB_SLURM_POLL_S", "2"))


def submit_and_follow(run_dir: Path, interval_s: float) -> str:
    """The supervisor's ``submit`` watch: submit and follow one run."""
    return _watch(run_dir, SlurmWatch.submit)


def follow_submitted(run_dir: Path, interval_s: float) -> str:
    """The supervisor's ``follow`` watch: the job a watcher that died submitted, followed to its
    end; never submitted again."""
    return _watch(run_dir, SlurmWatch.submitted)


def _watch(run_dir: Path, job_of: Callable[[SlurmWatch], str | None]) -> str:
    """A watcher error cancels the job and is recorded as the run's failure."""
    w = SlurmWatch(run_dir, poll_s())
    job_id = None
    try:
        job_id = job_of(w)
        return w.follow(job_id) if job_id else str(w.status.data.get("state"))
    except Exception as e:
        log.exception("the Slurm watcher failed")
        if job_id:  # nothing runs on the cluster that nobody watches
            slurm_cmd.cancel_quietly(job_id)
        w.status.update(
            state=FAILED,
            ended_at=now_iso(),
            diagnosis=supervisor_failure(
                f"the Slurm watcher failed: {e}", f"see {run_dir / 'supervisor.log'}"
            ).to_dict(),
        )
        return "error"
