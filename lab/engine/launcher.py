"""Turning a ``RunConfig`` into a running job, and stopping it.

``build_command`` is pure: config + run folder + port -> (argv, env), tested
exactly; argv is a list (never a shell string) so user text stays one item.
``launch``/``launch_sweep`` validate first (a refused config creates no
folder), write run.json and status.json ``queued``, start the detached
supervisor (``python -m lab.engine.supervisor``) and return as soon as it is up.
``stop`` asks the supervisor to stop (a ``stop.request`` file it polls) and
falls back to ending the recorded process tree itself when it is gone.
"""
from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

from lab.engine import procs
from lab.engine.config import RunConfig, compare_modes_configs, normalized, problems, validate  # noqa: F401 (re-exported)
from lab.runfolder import (ENDED_STATES, FINAL_STATES, REPO_ROOT, check_run_id, now_iso, read_json,
                           runs_dir as default_runs_dir, stamp, write_json_atomic)

_UP_TIMEOUT_S = 30.0
_children: list[subprocess.Popen] = []  # supervisors we started: polled so they never linger as zombies


class LaunchError(RuntimeError):
    """The supervisor could not be started; the message says why and what to do."""


def new_run_id(config: RunConfig) -> str:
    return check_run_id(f"{stamp()}-{config.mode}-{config.name or config.model}-{secrets.token_hex(2)}")


def _trainer_args(c: RunConfig, run_dir: Path) -> list[str]:
    args = ["-m", "training.train", "--mode", c.mode, "--model", c.model, "--dataset", c.dataset,
            "--epochs", str(c.epochs), "--max-steps", str(c.max_steps), "--batch-size", str(c.batch_size),
            "--lr", str(float(c.lr)), "--workers", str(c.workers), "--seed", str(c.seed),
            "--log-dir", str(run_dir), "--log-every", str(c.log_every), "--val-every", str(c.val_every),
            "--image-size", str(c.image_size), "--checkpoint", c.checkpoint,
            "--grad-norm-warn", str(float(c.grad_norm_warn)), "--device", "cuda" if c.gpus else "cpu"]
    if c.amp:
        args.append("--amp")
    return args


def run_env(config: RunConfig, run_dir: Path, cores: int | None = None,
            base_pythonpath: str | None = None) -> dict[str, str]:
    """Only the variables the launcher sets (what run.json records)."""
    cores = cores or os.cpu_count() or 1
    pp = str(REPO_ROOT) + (os.pathsep + base_pythonpath if base_pythonpath else "")
    env = {
        "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in config.gpus),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "OMP_NUM_THREADS": str(max(1, cores // config.processes)),
        "PYTHONUNBUFFERED": "1",
        "TORCHELASTIC_ERROR_FILE": str(Path(run_dir) / "error.json"),
        "PYTHONPATH": pp,
    }
    env.update(config.extra_env or {})
    return env


def _torchrun(c: RunConfig, run_dir: Path, port: int, node_rank: int) -> list[str]:
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(c.nproc), "--nnodes", str(c.nnodes)]
    if c.nnodes > 1:
        argv += ["--node-rank", str(node_rank), "--rdzv-backend", "c10d", "--rdzv-endpoint", c.rdzv_endpoint,
                 "--rdzv-id", Path(run_dir).name]
    else:
        argv += ["--master-addr", "127.0.0.1", "--master-port", str(port)]
    return argv + ["--log-dir", str(Path(run_dir) / "logs"), "--tee", "3"]


def build_command(config: RunConfig, run_dir: Path, port: int, *, base_env: dict[str, str] | None = None,
                  cores: int | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, env) for this node. env = ``base_env`` (default: os.environ) plus ``run_env``."""
    run_dir = Path(run_dir)
    base = dict(os.environ if base_env is None else base_env)
    env = base | run_env(config, run_dir, cores, base.get("PYTHONPATH"))
    if config.mode == "ddp":
        argv = _torchrun(config, run_dir, port, config.node_rank)
    else:
        argv = [sys.executable]
    return argv + _trainer_args(config, run_dir), env


def other_node_commands(config: RunConfig, run_dir: Path) -> list[list[str]]:
    """The exact command to start on each other node (node ranks other than this one's)."""
    if config.mode != "ddp" or config.nnodes <= 1:
        return []
    return [_torchrun(config, run_dir, 0, r) + _trainer_args(config, run_dir)
            for r in range(config.nnodes) if r != config.node_rank]


def preflight(config: RunConfig, snapshot) -> list[str]:
    """Plain-words lines: devices, per-device batch, backend, and the traps that apply."""
    c = config
    gpus = list(c.gpus)
    out: list[str] = []
    if gpus:
        names = {g.index: g.name for g in getattr(snapshot, "gpus", ())}
        out.append("Devices: " + ", ".join(f"GPU {g} ({names.get(g, 'unknown')})" for g in gpus) + ".")
        seen = ", ".join(f"cuda:{i}" for i in range(len(gpus)))
        if gpus != list(range(len(gpus))):
            out.append(f"CUDA_VISIBLE_DEVICES={','.join(map(str, gpus))} renumbers them: the trainer sees {seen}; "
                       "the dashboard keeps the physical numbers (CUDA_DEVICE_ORDER=PCI_BUS_ID, as NVML counts).")
    else:
        cores = getattr(getattr(snapshot, "cpu", None), "cores", None) or os.cpu_count() or 1
        out.append(f"Devices: the CPU ({cores} cores), no GPU.")
    b = c.batch_size
    if c.mode == "single":
        out.append(f"One process on one device; batch {b} per step.")
    elif c.mode == "dp":
        if len(gpus) < 2:
            out.append(f"DataParallel needs at least two GPUs; with {len(gpus)} it falls back to one device "
                       f"(recorded as effective mode single), batch {b} per step.")
        else:
            out.append(f"DataParallel in one process: each step scatters the batch of {b} over {len(gpus)} GPUs "
                       f"({b // len(gpus)} each), replicates the model and gathers the outputs on GPU {gpus[0]}.")
            out.append(f"GPU {gpus[0]} (the first) holds more memory than the others: it keeps the master copy "
                       "and gathers every output.")
    else:
        world = c.nproc * c.nnodes
        backend = "nccl" if gpus else "gloo"
        where = "one per GPU" if gpus else "on the CPU"
        out.append(f"DDP: {world} processes ({c.nproc} per node x {c.nnodes} node{'s' if c.nnodes > 1 else ''}, "
                   f"{where}) started by torchrun; {b // max(1, world)} samples per process per step; backend {backend}.")
        if not gpus:
            cores = os.cpu_count() or 1
            out.append(f"DDP on the CPU uses gloo: {c.nproc} processes share {cores} cores "
                       f"(OMP_NUM_THREADS={max(1, cores // c.nproc)} each), so expect little or no speedup.")
        if c.nnodes > 1:
            out.append(f"Rendezvous: c10d at {c.rdzv_endpoint}; start the command shown for each other node "
                       "with the same options; the job waits until all nodes have joined.")
        else:
            out.append("A free port is chosen for this job when it starts (not the default 29500), "
                       "so jobs on one machine never collide.")
    busy = [p for g in getattr(snapshot, "gpus", ()) if g.index in gpus for p in g.processes]
    if busy:
        from lab.engine.devices import holders
        out += [f"Busy: {h}." for h in holders(snapshot) if any(f"GPU {g}" in h for g in gpus)]
    if c.amp:
        out.append("AMP: fp16 autocast with a GradScaler on CUDA" if gpus else "AMP on the CPU: bf16 autocast")
    return out


# ---- starting -------------------------------------------------------------

def _new_run(config: RunConfig, root: Path, sweep_id: str | None, recorded_on: str) -> str:
    root.mkdir(parents=True, exist_ok=True)
    for _ in range(20):  # two launches in the same second draw the same 4 hex digits once in 65536
        run_id = new_run_id(config)
        run_dir = root / run_id
        try:
            run_dir.mkdir()
            break
        except FileExistsError:
            continue
    port = procs.free_port() if config.mode == "ddp" and config.nnodes == 1 else 0
    argv, _ = build_command(config, run_dir, port, base_env={})
    write_json_atomic(run_dir / "run.json", {
        "run_id": run_id, "name": config.name, "tags": list(config.tags), "config": config.to_dict(),
        "argv": argv, "env": run_env(config, run_dir, None, os.environ.get("PYTHONPATH")),
        "created_at": now_iso(), "host": socket.gethostname(), "sweep_id": sweep_id,
        "recorded_on": recorded_on, "other_nodes": other_node_commands(config, run_dir), "port": port or None,
    })
    write_json_atomic(run_dir / "status.json", {"state": "queued", "updated_at": now_iso()})
    return run_id


def _spawn_supervisor(args: list[str], log_path: Path) -> subprocess.Popen:
    for p in list(_children):
        if p.poll() is not None:
            _children.remove(p)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with open(log_path, "ab") as log:
        p = subprocess.Popen([sys.executable, "-m", "lab.engine.supervisor", *args], cwd=REPO_ROOT, env=env,
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True, close_fds=True)
    _children.append(p)
    return p


def _wait_up(p: subprocess.Popen, status_path: Path, log_path: Path) -> None:
    def up() -> bool:
        st = read_json(status_path) or {}
        return st.get("state") not in (None, "queued") or bool(st.get("supervisor_pid")) or p.poll() is not None
    procs.wait_until(up, _UP_TIMEOUT_S)
    st = read_json(status_path) or {}
    why = None
    if p.poll() is not None and st.get("state") in (None, "queued"):
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] if log_path.exists() else []
        why = f"the supervisor exited before starting the run ({' '.join(tail) or 'no output'}): see {log_path}"
    elif not (st.get("state") not in (None, "queued") or st.get("supervisor_pid")):
        why = f"the supervisor did not start within {_UP_TIMEOUT_S:.0f} s: see {log_path}"
        p.kill()
    if why:  # recorded too, so the run does not sit in "queued" until it is declared lost
        write_json_atomic(status_path, dict(st, state="failed", ended_at=now_iso(), updated_at=now_iso(), diagnosis={
            "key": "supervisor", "cause": why, "fix": "read the supervisor log, fix what it names, launch again",
            "rank": None, "exit_code": p.poll(), "excerpt": ""}))
        raise LaunchError(why)


def _machine() -> tuple[int, str]:
    """(GPU count, run.json's ``recorded_on``), without the process matching a full snapshot does."""
    from lab.engine import devices

    gpus = devices.read_gpus(with_processes=False)
    host = socket.gethostname()
    cores = os.cpu_count() or 1
    if gpus:
        names = ", ".join(sorted({g.name for g in gpus}))
        return len(gpus), f"{len(gpus)}x {names} (nccl), {host}, {cores} cores"
    return 0, f"CPU (gloo), {host}, {cores} cores"


def launch(config: RunConfig, runs_dir: Path | None = None) -> str:
    """Validate, create the run folder, start the supervisor; return the run id once it is up."""
    gpu_count, recorded_on = _machine()
    validate(config, gpu_count)
    config = normalized(config)
    root = Path(runs_dir).resolve() if runs_dir else default_runs_dir()
    run_id = _new_run(config, root, None, recorded_on)
    run_dir = root / run_id
    p = _spawn_supervisor([str(run_dir)], run_dir / "supervisor.log")
    _wait_up(p, run_dir / "status.json", run_dir / "supervisor.log")
    return run_id


def launch_sweep(configs: list[RunConfig], runs_dir: Path | None = None) -> tuple[str, list[str]]:
    """Run ``configs`` one after another under one background supervisor."""
    if not configs:
        raise ValueError("a sweep needs at least one config")
    gpu_count, recorded_on = _machine()
    for i, c in enumerate(configs):
        found = problems(c, gpu_count)
        if found:
            e = found[0]
            raise type(e)(e.field, f"run {i + 1} ({c.mode}): {e.message}")
    root = Path(runs_dir).resolve() if runs_dir else default_runs_dir()
    sweep_id = check_run_id(f"sweep-{stamp()}-{secrets.token_hex(2)}")
    run_ids = [_new_run(normalized(c), root, sweep_id, recorded_on) for c in configs]
    sweeps = root / ".sweeps"
    sweeps.mkdir(exist_ok=True)
    sweep_file = sweeps / f"{sweep_id}.json"
    write_json_atomic(sweep_file, {"sweep_id": sweep_id, "run_ids": run_ids, "runs_dir": str(root),
                                   "created_at": now_iso()})
    p = _spawn_supervisor(["--sweep", str(sweep_file)], sweeps / f"{sweep_id}.log")
    _wait_up(p, root / run_ids[0] / "status.json", sweeps / f"{sweep_id}.log")
    return sweep_id, run_ids


# ---- stopping -------------------------------------------------------------

def stop(run_id: str, runs_dir: Path | None = None, grace_s: float = 5) -> str:
    """Stop a run (SIGTERM to its processes, SIGKILL after ``grace_s``); return its final state.

    A finished run is left as it is (its state is returned). A queued run is
    cancelled before it starts. A run whose supervisor is gone has its
    recorded processes ended here.
    """
    from lab.engine import registry

    root = Path(runs_dir).resolve() if runs_dir else default_runs_dir()
    rec = registry.get_run(run_id, root)
    run_dir = Path(rec.run_dir)
    if rec.state in ENDED_STATES:
        return rec.state
    st = read_json(run_dir / "status.json") or {}
    sup_alive = procs.alive(st.get("supervisor_pid"), st.get("supervisor_ct"))
    if rec.state != "lost" and sup_alive:
        write_json_atomic(run_dir / "stop.request", {"grace_s": grace_s, "at": now_iso()})
        def done() -> bool:
            return (read_json(run_dir / "status.json") or {}).get("state") in FINAL_STATES
        if procs.wait_until(done, grace_s + 10, 0.1):
            return (read_json(run_dir / "status.json") or {})["state"]
    # no supervisor to do it (or it did not answer): end what was recorded ourselves
    st = read_json(run_dir / "status.json") or st
    procs.end_recorded(st, grace_s)
    st.update(state="stopped", ended_at=st.get("ended_at") or now_iso(), updated_at=now_iso())
    write_json_atomic(run_dir / "status.json", st)
    return "stopped"


def stop_sweep(sweep_id: str, runs_dir: Path | None = None, grace_s: float = 5) -> dict[str, str]:
    """Stop the running member of a sweep and cancel the rest; return run_id -> final state."""
    root = Path(runs_dir).resolve() if runs_dir else default_runs_dir()
    sweep = read_json(root / ".sweeps" / f"{check_run_id(sweep_id)}.json")
    if not sweep:
        raise KeyError(f"no sweep {sweep_id!r} in {root}")
    run_ids = list(sweep.get("run_ids") or [])
    for rid in run_ids:  # queued first, so the supervisor never starts them
        if (read_json(root / rid / "status.json") or {}).get("state") == "queued":
            write_json_atomic(root / rid / "stop.request", {"grace_s": grace_s, "at": now_iso()})
    return {rid: stop(rid, root, grace_s) for rid in run_ids}


def wait(run_id: str, runs_dir: Path | None = None, timeout_s: float = 600) -> str:
    """Block until the run reaches a final state (or ``timeout_s``); return the state."""
    from lab.engine import registry

    end = time.monotonic() + timeout_s
    while True:
        state = registry.get_run(run_id, runs_dir).state
        if state in FINAL_STATES or time.monotonic() > end:
            return state
        time.sleep(0.2)
