"""The link check: how fast this machine's devices all-reduce, size by size (``lab linkcheck``).

``plan`` picks the devices (the GPUs asked, the first N GPUs, or N CPU processes; the backend
follows: NCCL on GPUs, gloo on the CPU) and refuses what cannot run here, in one sentence
(``LinkCheckError``). ``run`` starts ``training.linkcheck`` under ``torchrun`` with
``run_and_wait`` (its own session, waited for, its group ended on a timeout), reads what rank 0
wrote and saves ``<runs>/linkchecks/<id>.json``: ``{"id", "created_at", "backend",
"world_size", "gpus", "topology", "topology_note", "results": [{"bytes", "time_ms", "algbw_gbps",
"busbw_gbps"}], "nccl": {"nccl_version", "transports", "links"}}`` (``nccl``: NCCL's transport
lines in the check's log, ``lab.engine.nccl_transports``; empty under gloo)
(nccl-tests' algbw and busbw, GB/s), its output beside it as ``<id>.log``. ``latest`` is the
newest check of a backend and world size (Compare's yardstick). Message sizes: 1 KiB to 256 MiB
doubling on GPUs, 1 KiB to 16 MiB quadrupling on the CPU (seconds, not minutes). With a
``model``, the record also holds what an fsdp run of it moves: ``"model"``, ``"units": [{"name",
"bytes"}]`` (each unit's float32 parameters as FSDP2 shards them), and ``"all_gather"`` and
``"reduce_scatter"``, rows as ``results``' at each distinct unit size (busbw = algbw × (n−1)/n);
``None`` and ``[]`` without one. ``rows_of(record, op)`` reads any of the three kinds.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from lab.engine import nccl_transports, procs, spawn
from lab.engine.devices import links
from lab.runfolder import (
    LINKCHECKS_DIR,
    REPO_ROOT,
    now_iso,
    read_json,
    stamp,
    write_json_atomic,
)

GPU_MAX_BYTES, CPU_MAX_BYTES = 256 << 20, 16 << 20
LIMIT_BYTES = 1 << 30  # the largest message on request (--max-mib 1024), as nccl-tests' -e 1G
TIMEOUT_S = 600.0
MAX_CPU_PROCS = 64
OPS = ("all_reduce", "all_gather", "reduce_scatter")  # the kinds a record times


class LinkCheckError(ValueError):
    """A link check that cannot run here, or failed; the message says why and what to do."""


def max_bytes_of(max_mib: float | None) -> int | None:
    """The largest message for ``--max-mib`` (None: the plan's default); refused, in one line,
    at 0 or less or above 1 GiB."""
    if max_mib is None:
        return None
    if max_mib <= 0:
        raise LinkCheckError("--max-mib: give a positive number of MiB")
    if max_mib * 1024**2 > LIMIT_BYTES:
        raise LinkCheckError(f"--max-mib: at most {LIMIT_BYTES >> 20} MiB (1 GiB), not {max_mib:g}")
    return int(max_mib * 1024**2)


@dataclass(frozen=True)
class Plan:
    backend: str  # "nccl" or "gloo"
    world_size: int
    gpus: tuple[int, ...]  # physical indices; empty on the CPU

    @property
    def max_bytes(self) -> int:
        return GPU_MAX_BYTES if self.gpus else CPU_MAX_BYTES


def plan(gpus: tuple[int, ...] | None, nproc: int | None, usable: tuple[int, ...]) -> Plan:
    """The devices of a check from ``--gpus`` or ``--nproc`` (neither: every GPU, else 2 CPU
    processes) on a machine whose readable GPUs are ``usable``."""
    if gpus is not None:
        if not usable:
            raise LinkCheckError(
                "--gpus: this machine has no GPU NVML can read; use --nproc N for a CPU check"
            )
        unknown = sorted(set(gpus) - set(usable))
        if unknown:
            have = ", ".join(map(str, usable))
            raise LinkCheckError(f"--gpus: no GPU {unknown[0]} here (readable GPUs: {have})")
        if len(set(gpus)) < 2:
            raise LinkCheckError("--gpus: a link check needs at least 2 GPUs")
        chosen = tuple(sorted(set(gpus)))
        return Plan("nccl", len(chosen), chosen)
    if nproc is not None and nproc < 2:
        raise LinkCheckError(f"--nproc: a link check needs at least 2 processes, not {nproc}")
    if usable and (nproc is None or nproc <= len(usable)):
        chosen = usable[: nproc or len(usable)]
        if len(chosen) >= 2:
            return Plan("nccl", len(chosen), chosen)
    if usable and nproc is not None:
        raise LinkCheckError(f"--nproc: {nproc} GPUs asked, this machine has {len(usable)}")
    n = nproc or 2
    if n > MAX_CPU_PROCS:
        raise LinkCheckError(f"--nproc: at most {MAX_CPU_PROCS} CPU processes, not {n}")
    return Plan("gloo", n, ())


def rows_of(rec: dict | None, op: str) -> list[dict]:
    """A record's rows of ``op`` (``OPS``): ``results`` for all_reduce, else the model's sizes
    (``[]`` for a check without a model, or saved before they were)."""
    got = (rec or {}).get("results" if op == "all_reduce" else op)
    return [r for r in got or [] if isinstance(r, dict)]


def model_of(name: str | None) -> str | None:
    """``--model`` checked as the launcher checks a run's (None: no model); refused in one
    line."""
    if not name:
        return None
    from lab.engine.launch.models import model_problem

    problem = model_problem(name)
    if problem:
        raise LinkCheckError(f"--model: {problem}")
    return name


def _command(
    p: Plan, part: Path, logs: Path, max_bytes: int, iters: int | None, model: str | None = None
) -> list[str]:
    from lab.engine import ports

    factor, warmup, default_iters = (2, 5, 20) if p.gpus else (4, 3, 10)
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(p.world_size),
        "--nnodes",
        "1",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(ports.free_port()),
        # torchrun's rank folders: without a --log-dir it makes one in /tmp and never removes it
        "--log-dir",
        str(logs),
        "-m",
        "training.linkcheck",
        "--out",
        str(part),
        "--max-bytes",
        str(max_bytes),
        "--factor",
        str(factor),
        "--warmup",
        str(warmup),
        "--iters",
        str(iters or default_iters),
        *(["--model", model] if model else []),
    ]


def _env(p: Plan) -> dict[str, str]:
    from lab.engine.launch.environment import visible_devices

    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (
        os.pathsep + env["PYTHONPATH"] if "PYTHONPATH" in env else ""
    )
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env["CUDA_VISIBLE_DEVICES"] = visible_devices(p.gpus) if p.gpus else ""
    env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // p.world_size))
    if p.gpus:  # NCCL's transport lines, parsed into the record (lab.engine.nccl_transports)
        env.setdefault("NCCL_DEBUG", "INFO")
        env.setdefault("NCCL_DEBUG_SUBSYS", "INIT,GRAPH")
    return env


def run(
    root: Path,
    p: Plan,
    max_bytes: int | None = None,
    iters: int | None = None,
    timeout_s: float = TIMEOUT_S,
    model: str | None = None,
) -> dict:
    """Run the check ``p`` and save it under ``root``/linkchecks; the saved record. With
    ``model``, also the all-gathers and reduce-scatters of its fsdp units."""
    model = model_of(model)
    folder = Path(root) / LINKCHECKS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    check_id = f"{stamp()}-{p.backend}-{p.world_size}-{secrets.token_hex(2)}"
    part, log = folder / f"{check_id}.part", folder / f"{check_id}.log"
    if max_bytes is not None and not 0 < max_bytes <= LIMIT_BYTES:
        raise LinkCheckError(f"the largest message must be 1 byte to 1 GiB, not {max_bytes}")
    logs = folder / f"{check_id}.torchrun"  # empty: the ranks' output is in the .log
    argv = _command(p, part, logs, int(max_bytes or p.max_bytes), iters, model)
    env = _env(p)
    try:
        rc = run_and_wait(argv, env, log, timeout_s)
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    got = read_json(part)
    part.unlink(missing_ok=True)
    if rc != 0 or not got or not got.get("results"):
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        how = f"ran past {timeout_s:.0f} s" if rc is None else f"exited with {rc}"
        raise LinkCheckError(f"the link check {how} ({' '.join(tail) or 'no output'}): see {log}")
    topo = (
        links.topology_record(p.gpus)
        if p.gpus
        else {
            "topology": None,
            "topology_note": "a CPU check (gloo): no GPU links",
        }
    )
    record = {
        "id": check_id,
        "created_at": now_iso(),
        "backend": got.get("backend", p.backend),
        "world_size": int(got.get("world_size", p.world_size)),
        "gpus": list(p.gpus),
        **topo,
        "timing": got.get("timing"),
        "results": got["results"],
        "model": got.get("model"),
        "units": got.get("units") or [],
        "all_gather": got.get("all_gather") or [],
        "reduce_scatter": got.get("reduce_scatter") or [],
        "nccl": nccl_transports.parse(log.read_text(errors="replace")),
        "nccl_env": {k: v for k, v in sorted(env.items()) if k.startswith("NCCL_")},
    }
    write_json_atomic(folder / f"{check_id}.json", record)
    return record


def timing_env(env: dict | None) -> dict:
    """The ``NCCL_*`` variables that change how collectives run: all but NCCL's logging ones."""
    return {k: v for k, v in (env or {}).items() if not k.startswith("NCCL_DEBUG")}


def latest(
    root: Path | str,
    backend: str,
    world_size: int,
    gpus: list[int] | tuple[int, ...] | None = None,
    nccl_env: dict | None = None,
) -> dict | None:
    """The newest saved check of ``backend`` over ``world_size`` ranks under ``root`` (None:
    none); with ``gpus``, of those GPUs; with ``nccl_env``, with the same NCCL variables
    (``timing_env``: logging aside; a check saved without ``nccl_env`` had none)."""
    folder = Path(root) / LINKCHECKS_DIR
    try:
        files = sorted(folder.glob("*.json"), reverse=True)  # ids begin with the time
    except OSError:
        return None
    for f in files:
        rec = read_json(f)
        if not rec or rec.get("backend") != backend or rec.get("world_size") != world_size:
            continue
        if gpus is not None and list(rec.get("gpus") or []) != list(gpus):
            continue
        if nccl_env is not None and timing_env(rec.get("nccl_env")) != timing_env(nccl_env):
            continue
        return rec
    return None


def run_and_wait(
    argv: list[str], env: dict[str, str], log_path: Path, timeout_s: float
) -> int | None:
    """Run ``argv`` (never through a shell) in its own session with its output in ``log_path``;
    its exit code, or None when it ran past ``timeout_s`` (or the wait was interrupted): then its
    process group and every descendant are ended, SIGTERM and after 5 s SIGKILL."""
    p = spawn.start(argv, log_path, cwd=REPO_ROOT, env=env)
    try:
        return p.wait(timeout=timeout_s)
    except spawn.TimeoutExpired:
        return None
    finally:
        if p.poll() is None:
            procs.end_tree([[p.pid, procs.create_time(p.pid)]], [p.pid], grace_s=5.0)
            p.wait()
