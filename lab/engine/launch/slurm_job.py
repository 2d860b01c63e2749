"""A run as a Slurm job: its job script, and what is said before it is submitted.

``build_sbatch(config, run_dir)`` is pure and tested exactly. The script asks
Slurm for ``nnodes`` nodes with one task each (and the config's partition,
GPUs and CPUs per node, time limit, account and free ``#SBATCH`` lines),
exports what the local launcher would set (``environment.run_env``, less what
Slurm chooses itself), starts one device sampler per node beside the training
(``srun --overlap ... python -m lab.engine.slurm.node_sampler``, writing
``sys/node<k>/``), then one ``srun`` task per node: torchrun with c10d
rendezvous on the first node of ``$SLURM_JOB_NODELIST`` (a port free there,
``--rdzv-id $SLURM_JOB_ID``) for DDP, plain Python for single/DP. Its output
goes to stdout.log; its exit code to ``job_exit.json`` (written only when the
script reaches its end: a job Slurm kills has none). ``script_sbatch`` is the
same job for a user's own script argv, in its working folder, with the
script's environment (``lab.engine.launch.script``); the samplers then start from
the repository (``srun --chdir``), whatever the script's folder and
``PYTHONPATH``. The job's options are checked in ``lab.engine.slurm.options``;
``preflight_lines`` and ``node_local`` are what the
Launch page and ``launch --dry-run`` say first. What the job's states mean is
``lab.engine.slurm.states``; the Slurm commands run in ``lab.engine.slurm.cmd``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from lab.engine.launch import commands, environment
from lab.engine.spec import modes
from lab.engine.spec.run import RunConfig
from lab.runfolder import JOB_EXIT, JOB_SBATCH, LOGS_DIR, REPO_ROOT, SCRIPT, STDOUT_LOG

# paths a node keeps to itself: other nodes never see them
NODE_LOCAL = ("/tmp", "/var/tmp", "/dev/shm")
# no single quote
_FREE_PORT = 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'


def _local_root(path: Path | str) -> tuple[Path, str] | None:
    p = Path(path).expanduser().resolve()
    return next(
        ((p, root) for root in NODE_LOCAL if p == Path(root) or Path(root) in p.parents), None
    )


def node_local(path: Path | str) -> str | None:
    """A warning when the runs folder ``path`` is on a node-local filesystem this module can
    recognise, else None."""
    found = _local_root(path)
    if found:
        return (
            f"the runs folder {found[0]} is under {found[1]}, which each node keeps to itself: "
            "the job's nodes "
            "cannot write the run there; set LAB_RUNS_DIR to a folder every node sees (a shared "
            "filesystem)"
        )
    return None


def workdir_local(path: Path | str) -> str | None:
    """The same warning for a script's working directory: the job runs the script there, on its
    nodes."""
    found = _local_root(path)
    if found:
        return (
            f"the working directory {found[0]} is under {found[1]}, which each node keeps to "
            "itself: the job "
            "runs there only where its node is this machine; give a working directory every node "
            "sees"
        )
    return None


def _directives(c: RunConfig, run_dir: Path) -> list[str]:
    lines = [
        f"--job-name=lab-{run_dir.name}",
        f"--output={run_dir / STDOUT_LOG}",
        "--open-mode=append",
        f"--nodes={c.nnodes}",
        "--ntasks-per-node=1",
    ]
    lines += [f"--cpus-per-task={c.cpus_per_task}"] if c.cpus_per_task else []
    lines += [f"--gpus-per-node={c.gpus_per_node}"] if c.gpus_per_node else []
    lines += [f"--{f}={getattr(c, f)}" for f in ("time", "partition", "account") if getattr(c, f)]
    return [f"#SBATCH {d}" for d in lines + [a.strip() for a in c.sbatch_args]]


def _exports(env: dict[str, str]) -> list[str]:
    out = []
    for k, v in env.items():
        # the trainer's: the repository, then what the node has
        if k == "PYTHONPATH" and v == str(REPO_ROOT):
            out.append(
                f"export PYTHONPATH={shlex.quote(str(REPO_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}"
            )
        else:
            out.append(f"export {k}={shlex.quote(v)}")
    return out


def _step(c: RunConfig, run_dir: Path, program: list[str], python: str) -> str:
    srun = ["srun", f"--nodes={c.nnodes}", "--ntasks-per-node=1"]
    # srun no longer inherits it (22.05)
    srun += [f"--cpus-per-task={c.cpus_per_task}"] if c.cpus_per_task else []
    if not modes.torchrun(c.mode):
        return shlex.join(srun + [python] + program)
    torchrun = [
        python,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(c.nnodes),
        "--nproc-per-node",
        str(c.nproc),
        "--rdzv-backend",
        "c10d",
    ]
    # a script has none
    torchrun += ["--max-restarts", str(c.max_restarts)] if getattr(c, "max_restarts", 0) else []
    tail = ["--log-dir", str(run_dir / LOGS_DIR), "--tee", "3"] + program
    return (
        shlex.join(srun + torchrun)
        + ' --rdzv-endpoint "$head_node:$port" --rdzv-id "$SLURM_JOB_ID" '
        + shlex.join(tail)
    )


def build_sbatch(
    config: RunConfig,
    run_dir: Path | str,
    program: list[str] | None = None,
    workdir: Path | str | None = None,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
) -> str:
    """The job script of a run of either kind: ``program`` (default: ``commands.program``, the
    trainer's ``-m training.train`` and its options, or a user's script and its arguments) run in
    ``workdir`` (default: the repository for the trainer, the script's working directory) on every
    node of the job, with ``env`` exported (default: ``environment.run_env``; a script's with the
    caller's own ``PYTHONPATH``)."""
    run_dir = Path(run_dir)
    c = config
    script = c.kind == SCRIPT
    program = commands.program(c, run_dir) if program is None else list(program)
    if env is None:
        env = environment.run_env(
            c, run_dir, None, os.environ.get("PYTHONPATH") if script else None
        )
    workdir = workdir or (c.work_dir() if script else REPO_ROOT)
    q = shlex.quote
    sampler = shlex.join(
        [
            "srun",
            "--overlap",
            f"--nodes={c.nnodes}",
            "--ntasks-per-node=1",
            "--kill-on-bad-exit=0",
            f"--chdir={REPO_ROOT}",
            python,
            "-m",
            "lab.engine.slurm.node_sampler",
            str(run_dir),
            "--gpus",
            "auto" if c.gpus_per_node else "none",
        ]
    )
    exit_file = run_dir / JOB_EXIT
    return "\n".join(
        [
            "#!/bin/bash",
            f"# Parallel Training Lab run {run_dir.name}, written by the lab; to run it again by "
            "hand:",
            f"#   sbatch --parsable {q(str(run_dir / JOB_SBATCH))}",
            *_directives(c, run_dir),
            "set -u",
            f"cd {q(str(workdir))}",
            *_exports(env),
            "# the rendezvous: the job's first node (where this script runs), on a port free there",
            'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            f"port=$({q(python)} -c '{_FREE_PORT}')",
            "# one device sampler per node, beside the training (sys/node<k>/ in the run folder)",
            f"{sampler} &",
            "sampler=$!",
            _step(c, run_dir, program, python),
            "rc=$?",
            "# srun passes SIGUSR1 on to the sampler, which then ends (SIGTERM would make srun "
            "kill the step)",
            'kill -USR1 "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null',
            'printf \'{"exit_code": %d, "ended_at": "%s"}\\n\' "$rc" "$(date -u '
            '+%Y-%m-%dT%H:%M:%S+00:00)" '
            f"> {q(str(exit_file))}.tmp && mv {q(str(exit_file))}.tmp {q(str(exit_file))}",
            'exit "$rc"',
            "",
        ]
    )


def script_sbatch(
    config: RunConfig,
    run_dir: Path | str,
    script_argv: list[str],
    workdir: Path | str | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """The job script of a user's own script: ``script_argv`` is the script's path and its arguments
    (``["train.py", "--epochs", "3"]`` or ``["-m", "pkg.train"]``), run under torchrun for DDP, else
    plain Python, in ``workdir`` (default: the run folder, so relative outputs land in the run),
    with ``env`` exported (``lab.engine.launch.environment.run_env`` for a script run; default the
    trainer's)."""
    return build_sbatch(config, run_dir, list(script_argv), workdir or run_dir, env=env)


def _placement(c: RunConfig) -> str:
    part = f"partition {c.partition}" if c.partition else "the cluster's default partition"
    limit = f"time limit {c.time}" if c.time else "the partition's default time limit"
    acct = f", account {c.account}" if c.account else ""
    return f"Slurm job: {c.nnodes} node{'s' if c.nnodes > 1 else ''} on {part}, {limit}{acct}."


def preflight_lines(config: RunConfig, runs_root: Path | str) -> list[str]:
    """Plain-words lines for a Slurm run: where, how many processes, devices, and the warnings that
    apply."""
    c = config
    out = [_placement(c)]
    gpus = c.gpus_per_node
    dev = (
        f"{gpus} GPU{'s' if gpus > 1 else ''} per node (Slurm sets CUDA_VISIBLE_DEVICES)"
        if gpus
        else "no GPU asked: the processes use the nodes' CPUs (gloo)"
    )
    # a user's script (lab.engine.launch.script) has no batch of ours
    batch = getattr(c, "batch_size", None)
    if modes.torchrun(c.mode):
        world = c.nproc * c.nnodes
        per = f"{batch // max(1, world)} samples per process per step; " if batch else ""
        out.append(
            f"{c.mode.upper()}: {world} processes ({c.nproc} per node x {c.nnodes} "
            f"node{'s' if c.nnodes > 1 else ''}), "
            f"one srun task per node starting torchrun; {per}"
            f"c10d rendezvous on the job's first node, on a port free there; {dev}."
        )
    else:
        out.append(
            f"{c.mode}: one process on one node"
            + (f", batch {batch} per step" if batch else "")
            + f"; {dev}."
        )
    cpus = (
        f"{c.cpus_per_task} CPUs per node"
        if c.cpus_per_task
        else "Slurm's default CPUs per node (often 1: set cpus_per_task to give the processes "
        "cores)"
    )
    out.append(
        f"CPUs: {cpus}. One device sampler per node writes sys/node<k>/ beside the training."
    )
    out.append(
        f"The job script is written to the run folder as {JOB_SBATCH} and submitted with sbatch "
        "--parsable; "
        "its state comes from squeue, Stop is scancel."
    )
    warn = node_local(runs_root)
    if warn:
        out.append(f"Warning: {warn}.")
    if not shutil.which("sbatch"):
        out.append(
            "Warning: sbatch is not on PATH here: run the lab where Slurm's commands work (a "
            "login node)."
        )
    return out
