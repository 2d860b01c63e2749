"""A new run folder, for both kinds of run: its id, its run.json and a Slurm run's job script.

``create`` is the one place a run folder is made and run.json written; a trainer run and a
user's script differ only in the ``Program`` it is given (the command, its environment, the other
nodes' commands and the job script, built for the new folder and its port) and in the few
run.json keys only one kind has. run.json's ``topology`` is the links between the run's GPUs
(``lab.engine.devices.links``), null with ``topology_note`` saying why (no GPU, a Slurm run).
preflight.json keeps the pre-flight's lines and expectations (``lab.engine.preflight``'s
``expectations``).
The run is queued until its supervisor writes status.json.
``machine`` is what a launch reads of this machine first.
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from lab.engine import ports
from lab.engine.devices import links
from lab.engine.devices import notes as device_notes
from lab.engine.devices import nvml as devices
from lab.engine.preflight import expectations
from lab.engine.spec import backends, modes, nccl
from lab.runfolder import JOB_SBATCH, RUN_JSON, check_run_id, now_iso, stamp, write_json_atomic


@dataclass(frozen=True)
class Program:
    """What a run folder records of the program: its command, environment, the other nodes'
    commands, and a Slurm run's job script (empty otherwise)."""

    argv: list[str]
    env: dict[str, str]
    other_nodes: list[list[str]]
    sbatch: str = ""


def machine() -> tuple[tuple[int, ...], str]:
    """(the GPU indices NVML can read, run.json's ``recorded_on``), without the process matching of
    a snapshot."""
    gpus = devices.read_gpus(with_processes=False)
    return tuple(g.index for g in gpus), device_notes.describe_machine(gpus, os.cpu_count() or 1)


def _new_dir(root: Path, mode: str, stem: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for _ in range(20):  # two launches in the same second draw the same 4 hex digits once in 65536
        run_dir = root / check_run_id(f"{stamp()}-{mode}-{stem}-{secrets.token_hex(2)}")
        try:
            run_dir.mkdir()
            break
        except FileExistsError:
            continue
    return run_dir


def _topology(config: Any) -> dict[str, Any]:
    """run.json's ``topology`` and ``topology_note``: the links between the GPUs the run chose."""
    backend = backends.of(config)
    if not backend.runs_here:
        return {
            "topology": None,
            "topology_note": f"a {backend.label} run: its nodes' links are not read here",
        }
    if not tuple(config.gpus or ()):
        return {"topology": None, "topology_note": "the run uses no GPU"}
    return links.topology_record(tuple(config.gpus))


def create(
    root: Path,
    config: Any,
    stem: str,
    program: Callable[[Path, int], Program],
    *,
    recorded_on: str,
    sweep_id: str | None = None,
    kind: dict[str, Any] | None = None,
    where: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> Path:
    """Make ``root``/<id> for ``config`` (either kind of run) and write its run.json.

    ``kind`` (before the name), ``where`` (after the environment) and ``after`` (at the end) are
    the keys only one kind of run has, in the order run.json has always had them."""
    run_dir = _new_dir(root, config.mode, stem)
    # the master port of a one-node torchrun run started here (a job finds a port on its node)
    local = modes.torchrun(config.mode) and config.nnodes == 1 and backends.of(config).runs_here
    port = ports.free_port() if local else 0
    p = program(run_dir, port)
    record: dict[str, Any] = {"run_id": run_dir.name, **(kind or {})}
    record.update(name=config.name, tags=list(config.tags), config=config.to_dict())
    record.update(argv=p.argv, env=p.env, **(where or {}))
    record.update(created_at=now_iso(), host=socket.gethostname(), sweep_id=sweep_id)
    record.update(recorded_on=recorded_on, other_nodes=p.other_nodes, port=port or None)
    record.update(_topology(config))
    record.update(nccl_env=nccl.nccl_env(p.env))
    why_not = nccl.NOT_FOR_TIMING.get(getattr(config, "nccl_preset", ""))
    if why_not:
        record.update(not_for_timing=why_not)
    write_json_atomic(run_dir / RUN_JSON, {**record, **(after or {})})
    if p.sbatch:  # a Slurm job's script, which its watcher submits
        (run_dir / JOB_SBATCH).write_text(p.sbatch)
    expectations.write(run_dir, config)  # preflight.json: what the pre-flight led to expect
    return run_dir
