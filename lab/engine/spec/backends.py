"""Where a run goes, as the facts the rest of the engine asks instead of naming the backend.

A run goes to this machine (``local``) or to a Slurm cluster as a job (``slurm``). ``of(config)``
is its ``Backend``: ``runs_here`` (its processes run on this machine, so its GPU indices, cores,
free ports and GPU links are this machine's and the pre-flight reads them; a job's are its nodes',
which Slurm gives it, and it finds its first node itself), ``node_gpus`` (the GPUs each node
gives a run), ``cores`` (what each node's processes share), ``where`` (run.json's
``recorded_on``), ``watch`` (which watch the one supervisor program, ``watcher``, runs over a new
run), ``rewatch`` (the supervisor's arguments for a waiting run whose watcher died) and
``stop_help`` (what Stop does). What a backend does (its commands, its job script, starting and
stopping) is ``lab.engine.launch.backends``'; these are the words and numbers only, so every
engine package may ask them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

LOCAL, SLURM = "local", "slurm"
BACKENDS = (LOCAL, SLURM)  # where a run goes: this machine, or a job on a Slurm cluster
# the one program that watches a run, of either backend (``python -m`` it with the run folder)
SUPERVISOR = "lab.engine.supervise.supervisor"


class Backend:
    """The facts of one backend; ``Local`` and ``Slurm`` are the two."""

    name: str
    label: str  # in a sentence: "a Slurm run"
    runs_here: bool
    watcher = SUPERVISOR
    watch: str  # the supervisor's ``--watch`` for a new run (lab.engine.supervise.supervisor)
    stop_help: str

    def rewatch(self, run_dir: Path, sweep: Path | None) -> tuple[str, ...]:
        """The supervisor's arguments for a waiting run whose watcher died (``sweep``: its sweep's
        file, when it has one)."""
        raise NotImplementedError

    def node_gpus(self, c: Any) -> int:
        """How many GPUs each node gives the run."""
        raise NotImplementedError

    def cores(self, c: Any, here: int | None) -> int | None:
        """The cores one node's processes share (``here``: this machine's, None: unknown)."""
        raise NotImplementedError

    def where(self, c: Any, recorded_on: str) -> str:
        """run.json's ``recorded_on``: where the run ran, as Compare shows it."""
        raise NotImplementedError


class Local(Backend):
    name, label, runs_here = LOCAL, "local", True
    watch = "start"  # wait for its turn in the runs folder's queue, then start its command
    stop_help = "SIGTERM to the run's processes, SIGKILL after 5 s"

    def rewatch(self, run_dir: Path, sweep: Path | None) -> tuple[str, ...]:
        # not started yet: a new supervisor queues it again, a sweep's waiting runs together
        return ("--sweep", str(sweep)) if sweep else (str(run_dir),)

    def node_gpus(self, c: Any) -> int:
        return len(tuple(getattr(c, "gpus", ()) or ()))

    def cores(self, c: Any, here: int | None) -> int | None:
        return here

    def where(self, c: Any, recorded_on: str) -> str:
        return recorded_on  # this machine, with its GPUs (lab.engine.launch.newrun.machine)


class Slurm(Backend):
    name, label, runs_here = SLURM, "Slurm", False
    watch = "submit"  # sbatch its job script, then follow the job
    stop_help = "scancel of the Slurm job"

    def rewatch(self, run_dir: Path, sweep: Path | None) -> tuple[str, ...]:
        # submitted already (waiting in Slurm's queue): follow that job, never sbatch it again
        return (str(run_dir), "--watch", "follow")

    def node_gpus(self, c: Any) -> int:
        return int(getattr(c, "gpus_per_node", 0) or 0)

    def cores(self, c: Any, here: int | None) -> int | None:
        # a job's CPUs per task (its processes are the tasks' when not given)
        return getattr(c, "cpus_per_task", 0) or c.processes

    def where(self, c: Any, recorded_on: str) -> str:
        gpus = self.node_gpus(c)
        dev = f"{gpus} GPU{'s' if gpus > 1 else ''}" if gpus else "CPU (gloo)"
        part = f", partition {c.partition}" if c.partition else ""
        return f"Slurm: {c.nnodes} node{'s' if c.nnodes > 1 else ''} x {dev}{part}"


_BY_NAME: dict[str, Backend] = {LOCAL: Local(), SLURM: Slurm()}


def named(name: str | None) -> Backend:
    """The backend called ``name`` (run.json's config ``backend``; none: local)."""
    return _BY_NAME.get(name or LOCAL, _BY_NAME[LOCAL])


def of(config: Any) -> Backend:
    """The backend of a run: a ``RunConfig``, a form's values or run.json's ``config`` mapping."""
    if isinstance(config, dict):
        return named(config.get("backend"))
    return named(getattr(config, "backend", None))
