"""What each backend does with a run: its command here, its job file, its pre-flight lines, what
its start may have refused, and what is left to end after a stop.

A ``Local`` run's command is its processes' (``commands.local_command``: python or torchrun in
front of the program); a ``Slurm`` run's is the submission of its job script (``sbatch --parsable
RUN/job.sbatch``, the script ``lab.engine.launch.slurm_job.build_sbatch``), Slurm starting every
node. Each extends the backend's facts (``lab.engine.spec.backends``: ``runs_here``, ``node_gpus``,
``where``, ``watcher``, ...) with these actions, so ``of(config)`` is the one object the launcher,
the previews and the sweeps ask; nothing outside this module and the Slurm packages names a backend
(tests/test_boundaries.py). The watcher a run gets is ``watcher``: the local supervisor, or the
Slurm job's (``lab.engine.supervise.slurm_watch``), which submits the job.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Mapping

from lab.engine.launch import commands
from lab.engine.launch import slurm_job as slurm
from lab.engine.slurm import cmd as slurm_cmd
from lab.engine.slurm import diagnoses as slurm_diagnoses
from lab.engine.spec import backends as facts
from lab.engine.spec.run import RunConfig
from lab.runfolder import JOB_SBATCH, SCRIPT
from lab.runrecords import read_status

Command = tuple[list[str], dict[str, str]]


class Local(facts.Local):
    """A run on this machine: the lab's supervisor starts its processes."""

    def command(
        self,
        config: RunConfig,
        run_dir: Path,
        port: int | str,
        base: dict[str, str],
        cores: int | None,
        uuids: dict[int, str] | None,
    ) -> Command:
        return commands.local_command(config, run_dir, port, base, cores, uuids)

    def job_script(self, config: RunConfig, run_dir: Path) -> str:
        return ""  # nothing but run.json: the supervisor starts run.json's argv

    def lines(self, config: RunConfig, runs_root: Path, here: Callable[[], list[str]]) -> list[str]:
        return here()  # the pre-flight of this machine's devices

    def warnings(self, config: RunConfig) -> list[str]:
        return []

    def refusal(self, run_dir: Path) -> str | None:
        return None  # a local supervisor that came up has started, or will record, the run

    def end_leftover(self, status: Mapping) -> None:
        return None  # its processes are this machine's: procs.end_recorded ended them


class Slurm(facts.Slurm):
    """A run as a Slurm job: the watcher submits job.sbatch, and Slurm starts every node."""

    def command(
        self,
        config: RunConfig,
        run_dir: Path,
        port: int | str,
        base: dict[str, str],
        cores: int | None,
        uuids: dict[int, str] | None,
    ) -> Command:
        # the job script sets the job's environment; here only sbatch runs
        return slurm_cmd.submit_argv(run_dir / JOB_SBATCH), base

    def job_script(self, config: RunConfig, run_dir: Path) -> str:
        return slurm.build_sbatch(config, run_dir)

    def lines(self, config: RunConfig, runs_root: Path, here: Callable[[], list[str]]) -> list[str]:
        return slurm.preflight_lines(config, runs_root)  # this machine's devices do not bear on it

    def warnings(self, config: RunConfig) -> list[str]:
        # a script's working folder that the other nodes cannot see
        warn = slurm.workdir_local(config.cwd) if config.kind == SCRIPT else None
        return [warn] if warn else []

    def refusal(self, run_dir: Path) -> str | None:
        """Why the job was not submitted (sbatch refused it, or Slurm could not be asked), as
        the watcher recorded it; None once it was."""
        d = read_status(run_dir).diagnosis or {}
        if d.get("key") in slurm_diagnoses.NOT_SUBMITTED:
            return f"{d['cause']} {d['fix']}"  # the run folder keeps job.sbatch and why
        return None

    def end_leftover(self, status: Mapping) -> None:
        job_id = (status.get("slurm") or {}).get("job_id")
        if job_id:  # the job runs on the cluster: only Slurm can end it
            slurm_cmd.cancel_quietly(str(job_id))


Backend = Local | Slurm
_BY_NAME: dict[str, Backend] = {facts.LOCAL: Local(), facts.SLURM: Slurm()}


def named(name: str | None) -> Backend:
    """The backend called ``name`` (run.json's config ``backend``; none: local)."""
    return _BY_NAME[facts.named(name).name]


def of(config: RunConfig | Mapping) -> Backend:
    """The backend of a run (a ``RunConfig`` or run.json's ``config``)."""
    return _BY_NAME[facts.of(config).name]


def build_command(
    config: RunConfig,
    run_dir: Path | str,
    port: int | str,
    *,
    base_env: dict[str, str] | None = None,
    cores: int | None = None,
    uuids: dict[int, str] | None = None,
) -> Command:
    """(argv, env) of the run's command on this machine. env = ``base_env`` (default: os.environ)
    plus, for a local run, ``environment.run_env``; ``port`` is the single-node DDP master port
    (a placeholder text where the command is only shown); ``uuids`` (physical index -> UUID) is
    read from NVML when not given. A Slurm run: the sbatch command and ``base_env`` alone."""
    base = dict(os.environ if base_env is None else base_env)
    return of(config).command(config, Path(run_dir), port, base, cores, uuids)
