"""The supervisor of a Slurm run: it submits the run's job.sbatch, follows the job to its end, and
stops it.

``python -m lab.engine.supervise.slurm_watch RUN_DIR``, started detached by the launcher
(``launcher.start_supervisor``) in place of ``lab.engine.supervise.supervisor`` for a run whose
backend is slurm, so the job is watched without the dashboard. It submits through
``lab.engine.slurm.cmd`` (a refusal is recorded ``failed`` with sbatch's words, key
``slurm_refused``, or ``slurm_unavailable`` when Slurm cannot be asked; the launcher raises both),
then asks Slurm every poll (``LAB_SLURM_POLL_S``, 2 s by default) and keeps status.json's ``state``
and ``slurm`` (``job_id``, Slurm's ``state``, pending ``reason``, ``nodes``) up to date. A
``stop.request`` (or SIGTERM) is ``scancel``; the run is over once Slurm has cleaned the job up (not
COMPLETING); a job that does not end within ``STOP_WAIT_S`` of the stop (Slurm unreachable) is left
to Slurm and the watcher exits (the run then reads ``lost``). Its end: COMPLETED succeeded,
CANCELLED stopped, FAILED failed with the logs' diagnosis, TIMEOUT and the other ends Slurm causes
failed with theirs (``lab.engine.slurm.states``). A job Slurm forgot is read from the job's own
``job_exit.json``; without one the run is recorded ``lost``. Like the local supervisor it is
status.json's only writer for its run; it records ``kind`` and ``events_dirs`` as the local
supervisor does (``lab.engine.supervise.linked``: a user's script's event folders below its working
directory, scanned every poll and once at the end; the job's processes run on the nodes, so any
event file created there after the submission counts)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

from lab.engine import procs
from lab.engine.health.watch import HealthWatch
from lab.engine.slurm import cmd as slurm_cmd
from lab.engine.slurm.diagnoses import end_diagnosis, gone, job_failed, refused, unavailable
from lab.engine.slurm.states import Job
from lab.engine.spec.backends import SLURM
from lab.engine.spec.diagnosis import supervisor_failure
from lab.engine.supervise.diagnose import diagnose, named
from lab.engine.supervise.linked import EventLinker
from lab.engine.supervise.status import Status
from lab.runfolder import (
    FAILED,
    JOB_EXIT,
    JOB_SBATCH,
    LOST,
    QUEUED,
    RUN_JSON,
    RUNNING,
    STOP_REQUEST,
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


class _Flags:
    stop = False  # set by SIGTERM: cancel the job


class SlurmWatch:
    """One Slurm run, from its submission to its end."""

    def __init__(self, run_dir: Path, poll_s: float) -> None:
        self.run_dir = run_dir
        self.poll_s = poll_s
        run = read_json(run_dir / RUN_JSON) or {}
        self.config = run.get("config") or {}
        self.status = Status(run_dir)
        # events_dirs as the local supervisor links them; the job's pids are the nodes', so none
        # filter
        self.linker = EventLinker(run, run_dir)
        # the same health watch as a local run's: stalled (with the stacks of the job's processes
        # on this machine), NaN, memory and the rest, from the events and progress it writes
        self.health = HealthWatch(run_dir, run, self.status.update, self.status.data.get("health"))
        me = os.getpid()
        self.me = dict(
            supervisor_pid=me,
            supervisor_ct=procs.create_time(me),
            backend=SLURM,
            kind=self.linker.kind,
            events_dirs=self.linker.dirs,
        )

    def _stop_asked(self) -> bool:
        return _Flags.stop or (self.run_dir / STOP_REQUEST).exists()

    def submit(self) -> str | None:
        """sbatch the job script; its job id, or None when there is nothing to follow (refused, or
        stopped first)."""
        if self._stop_asked():
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

    def follow(self, job_id: str) -> str:
        """Poll Slurm until the job is over (cancelling it when asked); record and return the run's
        end."""
        cancelled = False
        asked_at: float | None = None
        last: Job | None = None
        misses = 0
        while True:
            if self._stop_asked() and not cancelled:
                log.info("stop asked: scancel %s", job_id)
                asked_at = asked_at or time.monotonic()
                cancelled = slurm_cmd.cancel_quietly(job_id)
                self.status.update(stopping=True)
            # Slurm unreachable: the run reads lost
            if asked_at and time.monotonic() - asked_at > STOP_WAIT_S:
                log.error(
                    "job %s did not end within %.0f s of the stop; leaving it to Slurm",
                    job_id,
                    STOP_WAIT_S,
                )
                return "error"
            try:
                job = slurm_cmd.job(job_id)
            except slurm_cmd.SlurmError as e:  # a controller restarting: ask again at the next poll
                log.warning("%s", e)
                time.sleep(self.poll_s)
                continue
            misses = misses + 1 if job is None else 0
            if misses >= GONE_AFTER:
                return self._gone(job_id, cancelled)
            if job is None:
                time.sleep(self.poll_s)
                continue
            # an ended job's state is written once, by _finish, with its diagnosis: a reader never
            # sees "failed" without why (a test on the cluster read TIMEOUT with no diagnosis)
            if job.over:
                return self._finish(job)
            if job != last:
                self._show(job)
                last = job
            if self.linker.scan():
                self.status.update(events_dirs=self.linker.dirs)
            if job.run_state == RUNNING:
                self._look(job_id)
            time.sleep(self.poll_s)

    def _look(self, job_id: str) -> None:
        """The health watch's tick: the job's processes here (none when its nodes are others:
        then it is alive as long as Slurm says it runs, and a stall has no stacks)."""
        pids = set(slurm_cmd.local_pids(job_id))
        tops = [p for p in sorted(pids) if not set(procs.lineage(p)[1:2]) & pids]
        # what a local supervisor's child is: the trainer, torchrun or the script, not the batch
        # shell, nor the lab's node sampler (each srun step is a tree of its own)
        every = [q.pid for t in tops for q in procs.tree(t)]
        top = next((q for q in every if runs_the_run(procs.cmdline(q))), 0)
        tree = procs.tree(top) if top else []
        self.health.tick(top, tree, {}, self.linker.dirs, alive=True)

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
        self.linker.scan(force=True)  # a script that ran less than a scan interval is linked too
        self.health.finish(self.linker.dirs)
        self.status.update(
            state=state,
            exit_code=rc,
            ended_at=now_iso(),
            stopping=False,
            slurm=job.to_status(),
            diagnosis=diag.to_dict() if diag else None,
            events_dirs=self.linker.dirs,
        )
        log.info("job %s: %s -> %s (exit %s)", job.job_id, job.state, state, rc)
        return state

    def _gone(self, job_id: str, cancelled: bool) -> str:
        """Slurm no longer knows the job: its own record of its end decides, else it is lost."""
        recorded = read_json(self.run_dir / JOB_EXIT)
        if recorded is not None:
            rc = recorded.get("exit_code")
            return self._finish(Job(job_id, "COMPLETED" if rc == 0 else "FAILED", "", "", rc))
        if cancelled:
            self.linker.scan(force=True)
            self.status.update(
                state=STOPPED, ended_at=now_iso(), stopping=False, events_dirs=self.linker.dirs
            )
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


def watch(run_dir: Path, poll_s: float) -> str:
    """Submit and follow one run; a watcher error cancels the job and is recorded as the run's
    failure."""
    w = SlurmWatch(run_dir, poll_s)
    job_id = None
    try:
        job_id = w.submit()
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


def _on_sigterm(signum, frame) -> None:
    _Flags.stop = True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m lab.engine.supervise.slurm_watch", description=__doc__.splitlines()[0]
    )
    ap.add_argument("run_dir", help="the run folder, with run.json and job.sbatch written")
    ap.add_argument(
        "--poll",
        type=float,
        default=float(os.environ.get("LAB_SLURM_POLL_S", "2")),
        help="seconds between questions to Slurm (default 2)",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, _on_sigterm)
    return 1 if watch(Path(args.run_dir), args.poll) == "error" else 0


if __name__ == "__main__":
    sys.exit(main())
