"""Turning a ``RunConfig`` into a running job, and stopping it.

``build_command`` is pure: config + run folder + port (+ the GPUs' UUIDs,
read from NVML unless given) -> (argv, env), tested exactly; argv is a list
(never a shell string) so user text stays one item. GPUs are named by UUID
(``visible_devices``); other nodes' commands carry ``env VAR=value`` first.
``launch``/``launch_sweep`` validate first (a refused config creates no
folder), write run.json, start the detached supervisor
(``python -m lab.engine.supervisor``, ``start_supervisor``) and return as soon
as it is up. ``stop`` asks the supervisor to stop (a ``stop.request`` file it
polls) and falls back to ending the recorded process tree itself when it is
gone. status.json is the supervisor's; the launcher writes it only where no
supervisor exists to (``_record_without_supervisor``). Tested by
tests/test_engine_runs.py (real runs) and tests/test_engine_config.py (commands).
"""
from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

from lab.engine import device_notes, devices, environment, ports, procs, registry
from lab.engine.config import RunConfig, normalized, problems, validate
from lab.engine.sweeps import SCALINGS
from lab.engine.diagnose import supervisor_failure
from lab.engine.preflight import machine_facts
from lab.runfolder import (ENDED_STATES, FAILED, LOGS_DIR, LOST, QUEUED, REPO_ROOT, RUN_JSON, RUNNING, STARTING,
                           STACKS_REQUEST, STATUS_JSON, STOP_REQUEST, STOPPED, SUPERVISOR_LOG, SWEEPS_DIR, check_run_id, is_final,
                           now_iso, read_json, root_or_default, stamp, write_json_atomic)

PORT_FLAG = "--master-port"  # the supervisor replaces the value after it when the port is taken
_UP_TIMEOUT_S = 30.0
_children: list[subprocess.Popen] = []  # supervisors we started: polled so they never linger as zombies


class LaunchError(RuntimeError):
    """The supervisor could not be started; the message says why and what to do."""


def _new_run_id(config: RunConfig) -> str:
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
    if c.profile_steps:
        args += ["--profile-steps", c.profile_steps]
    if c.stop_on_nan:
        args.append("--stop-on-nan")
    if c.data_delay_ms:
        args += ["--data-delay-ms", str(float(c.data_delay_ms))]
    if c.resume or c.max_restarts:  # a restarted attempt continues from its own last checkpoint
        args += ["--resume", c.resume or "auto"]
    return args


def _torchrun(c: RunConfig, run_dir: Path, port: int | str, node_rank: int) -> list[str]:
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(c.nproc), "--nnodes", str(c.nnodes)]
    if c.nnodes > 1:
        argv += ["--node-rank", str(node_rank), "--rdzv-backend", "c10d", "--rdzv-endpoint", c.rdzv_endpoint,
                 "--rdzv-id", Path(run_dir).name]
    else:
        argv += ["--master-addr", "127.0.0.1", PORT_FLAG, str(port)]
    if getattr(c, "max_restarts", 0):  # a script's config has none
        argv += ["--max-restarts", str(c.max_restarts)]
    return argv + ["--log-dir", str(Path(run_dir) / LOGS_DIR), "--tee", "3"]


def build_command(config: RunConfig, run_dir: Path, port: int | str, *, base_env: dict[str, str] | None = None,
                  cores: int | None = None, uuids: dict[int, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, env) for this node. env = ``base_env`` (default: os.environ) plus ``environment.run_env``.

    ``port`` is the single-node DDP master port (a placeholder text where the command is only shown: the real
    one is chosen free at the start). ``uuids`` (physical index -> UUID) is read from NVML when not given.
    """
    run_dir = Path(run_dir)
    base = dict(os.environ if base_env is None else base_env)
    env = base | environment.run_env(config, run_dir, cores, base.get("PYTHONPATH"), uuids)
    argv = _torchrun(config, run_dir, port, config.node_rank) if config.mode == "ddp" else [sys.executable]
    return argv + _trainer_args(config, run_dir), env


def other_node_commands(config: RunConfig, run_dir: Path) -> list[list[str]]:
    """The exact command for each other node, run from the repository, with ``env`` + ``other_node_env`` first."""
    if config.mode != "ddp" or config.nnodes <= 1:
        return []
    env = ["env"] + [f"{k}={v}" for k, v in environment.other_node_env(config).items()]
    return [env + _torchrun(config, run_dir, 0, r) + _trainer_args(config, run_dir)
            for r in range(config.nnodes) if r != config.node_rank]


# ---- starting -------------------------------------------------------------

def _new_run(config: RunConfig, root: Path, sweep_id: str | None, recorded_on: str, scaling: str | None = None,
             resumed_from: str | None = None) -> str:
    """Create the run folder and its run.json; the run is queued until its supervisor writes status.json."""
    root.mkdir(parents=True, exist_ok=True)
    for _ in range(20):  # two launches in the same second draw the same 4 hex digits once in 65536
        run_id = _new_run_id(config)
        run_dir = root / run_id
        try:
            run_dir.mkdir()
            break
        except FileExistsError:
            continue
    port = ports.free_port() if config.mode == "ddp" and config.nnodes == 1 else 0
    uuids = devices.uuids(config.gpus)
    argv, _ = build_command(config, run_dir, port, base_env={}, uuids=uuids)
    write_json_atomic(run_dir / RUN_JSON, {
        "run_id": run_id, "name": config.name, "tags": list(config.tags), "config": config.to_dict(),
        "argv": argv, "env": environment.run_env(config, run_dir, None, os.environ.get("PYTHONPATH"), uuids),
        "created_at": now_iso(), "host": socket.gethostname(), "sweep_id": sweep_id,
        "recorded_on": recorded_on, "other_nodes": other_node_commands(config, run_dir), "port": port or None,
        "scaling": scaling, "resumed_from": resumed_from,
    })
    return run_id


def _record_without_supervisor(run_dir: Path, status: dict, state: str, **fields) -> None:
    """Write a run's status.json from the launcher: only where no supervisor exists to write it.

    The supervisor is status.json's writer. The launcher writes it at two ends of a run no supervisor will
    record: the supervisor never came up (``failed``, so the run does not sit in ``queued`` until it is
    declared lost), and ``stop`` of a run whose supervisor is gone or did not answer (``stopped``).
    """
    write_json_atomic(run_dir / STATUS_JSON, dict(status, state=state, ended_at=status.get("ended_at") or now_iso(),
                                                  updated_at=now_iso(), **fields))


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


def _wait_up(p: subprocess.Popen, run_dir: Path, log_path: Path) -> None:
    def up() -> bool:
        st = read_json(run_dir / STATUS_JSON) or {}
        return st.get("state") not in (None, QUEUED) or bool(st.get("supervisor_pid")) or p.poll() is not None
    procs.wait_until(up, _UP_TIMEOUT_S)
    st = read_json(run_dir / STATUS_JSON) or {}
    why = None
    if p.poll() is not None and st.get("state") in (None, QUEUED):
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] if log_path.exists() else []
        why = f"the supervisor exited before starting the run ({' '.join(tail) or 'no output'}): see {log_path}"
    elif not (st.get("state") not in (None, QUEUED) or st.get("supervisor_pid")):
        why = f"the supervisor did not start within {_UP_TIMEOUT_S:.0f} s: see {log_path}"
        p.kill()
    if why:
        diagnosis = supervisor_failure(why, "read the supervisor log, fix what it names, launch again", p.poll())
        _record_without_supervisor(run_dir, st, FAILED, diagnosis=diagnosis.to_dict())
        raise LaunchError(why)


def start_supervisor(run_dir: Path | str) -> None:
    """Start the background supervisor of a run folder whose run.json is written; return once it is up.

    ``launch`` calls it for the folder it made; a folder written by other
    means (a test's, a script's) runs the same way. Raises ``LaunchError``
    when the supervisor does not come up (the run is then recorded failed).
    """
    run_dir = Path(run_dir)
    log_path = run_dir / SUPERVISOR_LOG
    _wait_up(_spawn_supervisor([str(run_dir)], log_path), run_dir, log_path)


def _machine() -> tuple[tuple[int, ...], str]:
    """(the GPU indices NVML can read, run.json's ``recorded_on``), without the process matching of a snapshot."""
    gpus = devices.read_gpus(with_processes=False)
    return tuple(g.index for g in gpus), device_notes.describe_machine(gpus, os.cpu_count() or 1)


def launch(config: RunConfig, runs_dir: Path | None = None, *, resumed_from: str | None = None) -> str:
    """Validate, create the run folder, start the supervisor; return the run id once it is up.

    ``resumed_from``: the run whose checkpoint ``config.resume`` names (``lab.engine.resume``), kept in run.json.
    """
    usable, recorded_on = _machine()
    validate(config, usable, machine_facts(config))  # the pre-flight's refusals too: nothing starts
    root = root_or_default(runs_dir)
    run_id = _new_run(normalized(config), root, None, recorded_on, resumed_from=resumed_from)
    start_supervisor(root / run_id)
    return run_id


def _sweep_file(root: Path, sweep_id: str, suffix: str = ".json") -> Path:
    return root / SWEEPS_DIR / f"{check_run_id(sweep_id)}{suffix}"


def launch_sweep(configs: list[RunConfig], runs_dir: Path | None = None, *,
                 scaling: str | list[str | None] | None = None) -> tuple[str, list[str]]:
    """Run ``configs`` one after another under one background supervisor.

    ``scaling`` (``sweeps.SCALINGS``, one for all or one per config) is what the
    configs were made under (``sweeps.compare_modes_configs``); each run.json
    records its own, for the Compare page to label and compute efficiency by.
    """
    if not configs:
        raise ValueError("a sweep needs at least one config")
    scalings = list(scaling) if isinstance(scaling, (list, tuple)) else [scaling] * len(configs)
    if len(scalings) != len(configs) or not set(scalings) <= set(SCALINGS) | {None}:
        raise ValueError(f"scaling {scaling!r}: give one of {SCALINGS} for all the configs or one per config")
    usable, recorded_on = _machine()
    for i, c in enumerate(configs):
        found = problems(c, usable, machine_facts(c))
        if found:
            raise type(found[0])(found[0].field, f"run {i + 1} ({c.mode}): {found[0].message}")
    root = root_or_default(runs_dir)
    sweep_id = check_run_id(f"sweep-{stamp()}-{secrets.token_hex(2)}")
    run_ids = [_new_run(normalized(c), root, sweep_id, recorded_on, sc) for c, sc in zip(configs, scalings)]
    sweep_file = _sweep_file(root, sweep_id)
    sweep_file.parent.mkdir(exist_ok=True)
    write_json_atomic(sweep_file, {"sweep_id": sweep_id, "run_ids": run_ids, "runs_dir": str(root),
                                   "created_at": now_iso(), "scaling": scaling})
    log_path = _sweep_file(root, sweep_id, ".log")
    _wait_up(_spawn_supervisor(["--sweep", str(sweep_file)], log_path), root / run_ids[0], log_path)
    return sweep_id, run_ids


# ---- stopping -------------------------------------------------------------

def _request_stop(run_dir: Path, grace_s: float) -> None:
    write_json_atomic(run_dir / STOP_REQUEST, {"grace_s": grace_s, "at": now_iso()})


def stop(run_id: str, runs_dir: Path | None = None, grace_s: float = 5) -> str:
    """Stop a run (SIGTERM to its processes, SIGKILL after ``grace_s``); return its final state.

    A finished run is left as it is (its state is returned). A queued run is
    cancelled before it starts. A run whose supervisor is gone (``lost``) has
    its recorded processes ended here, and is recorded ``stopped``.
    """
    root = root_or_default(runs_dir)
    run_dir = Path(registry.get_run(run_id, root).run_dir)
    st = registry.status(run_dir)
    if st.get("state") in ENDED_STATES:
        return st["state"]
    _request_stop(run_dir, grace_s)  # also keeps a supervisor that comes up late from starting it
    if st.get("state") != LOST and procs.alive(st.get("supervisor_pid"), st.get("supervisor_ct")):
        if procs.wait_until(lambda: is_final(registry.status(run_dir).get("state")), grace_s + 10, 0.1):
            st = registry.status(run_dir)
            if st.get("state") in ENDED_STATES:
                return st["state"]
    # no supervisor to do it (gone, or it did not answer): end what was recorded ourselves
    st = read_json(run_dir / STATUS_JSON) or {}
    procs.end_recorded(st, grace_s)
    _record_without_supervisor(run_dir, st, STOPPED)
    return STOPPED


def request_stacks(run_id: str, runs_dir: Path | None = None) -> Path:
    """Ask a running run's supervisor for every rank's stack now (a ``stacks.request`` file it polls, as it
    polls ``stop.request``); return the run folder. Its answer is status.json's ``stacks``."""
    rec = registry.get_run(run_id, root_or_default(runs_dir))
    if rec.state not in (STARTING, RUNNING):
        raise LaunchError(f"run {run_id} is {rec.state}: only a running run has stacks to take")
    write_json_atomic(Path(rec.run_dir) / STACKS_REQUEST, {"at": now_iso()})
    return Path(rec.run_dir)


def stop_sweep(sweep_id: str, runs_dir: Path | None = None, grace_s: float = 5) -> dict[str, str]:
    """Stop the running member of a sweep and cancel the rest; return run_id -> final state."""
    root = root_or_default(runs_dir)
    sweep = read_json(_sweep_file(root, sweep_id))
    if not sweep:
        raise KeyError(f"no sweep {sweep_id!r} in {root}")
    run_ids = list(sweep.get("run_ids") or [])
    for rid in run_ids:  # queued first, so the supervisor never starts them
        if registry.status(root / rid).get("state") == QUEUED:
            _request_stop(root / rid, grace_s)
    return {rid: stop(rid, root, grace_s) for rid in run_ids}


def wait(run_id: str, runs_dir: Path | None = None, timeout_s: float = 600) -> str:
    """Block until the run reaches a final state (or ``timeout_s``); return the state."""
    end = time.monotonic() + timeout_s
    while True:
        state = registry.get_run(run_id, runs_dir).state
        if is_final(state) or time.monotonic() > end:
            return state
        time.sleep(0.2)
