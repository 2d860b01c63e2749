"""Turning a ``RunConfig`` into a running job, and stopping it.

What differs by where a run goes is its backend's (``lab.engine.launch.backends``: its command,
its job script, its watcher, what its start may have refused, what a stop leaves to end); this
module names none. ``launch`` validates first (a refused config creates no folder), writes run.json
(and a Slurm run's job.sbatch), starts the run's detached watcher (``start_supervisor``: the
backend's ``watcher``, ``python -m lab.engine.supervise.supervisor`` for a local run) and returns
as soon as it is up. ``stop`` asks the supervisor to stop (a ``stop.request`` file it polls) and
falls back to ending the recorded process tree itself when it is gone (and what the backend leaves,
a Slurm job through ``scancel``). status.json is the supervisor's; the launcher writes it only
where no supervisor exists to (``_record_without_supervisor``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from lab.engine import procs, registry, spawn
from lab.engine.devices import nvml as devices
from lab.engine.launch import backends, environment, newrun, script
from lab.engine.launch.commands import other_node_commands
from lab.engine.launch.config import normalized, problems
from lab.engine.preflight.checks import machine_facts
from lab.engine.queue import book as queue_book
from lab.engine.spec import sweep as sweep_record
from lab.engine.spec.diagnosis import supervisor_failure
from lab.engine.spec.run import ConfigError, RunConfig, script_stem
from lab.runfolder import (
    ENDED_STATES,
    FAILED,
    LOST,
    QUEUED,
    REPO_ROOT,
    RUNNING,
    SCRIPT,
    STACKS_REQUEST,
    STARTING,
    STATUS_JSON,
    STOP_REQUEST,
    STOPPED,
    SUPERVISOR_LOG,
    is_final,
    now_iso,
    root_or_default,
    write_json_atomic,
)
from lab.runrecords import read_run, read_status

_UP_TIMEOUT_S = 30.0
_SUPERVISOR = "lab.engine.supervise.supervisor"  # a local run's, and a sweep's
# supervisors we started: polled so they never linger as zombies
_children: list[spawn.Popen] = []


class LaunchError(RuntimeError):
    """The supervisor could not be started; the message says why and what to do."""


# ---- starting -------------------------------------------------------------


def new_run(
    config: RunConfig,
    root: Path,
    sweep_id: str | None,
    recorded_on: str,
    scaling: str | None = None,
    resumed_from: str | None = None,
    varied: dict[str, Any] | None = None,
) -> str:
    """Create the run's folder and its run.json (``newrun.create``), of either kind of run; return
    its id. ``varied``: the options a knob sweep varies and this run's values (run.json's, only
    then). A script run's run.json has ``kind`` and ``cwd``, and no ``scaling`` or
    ``resumed_from`` (a script's batch is its own; it is not resumed by the lab)."""

    def program(run_dir: Path, port: int) -> newrun.Program:
        uuids = devices.uuids(config.gpus)
        argv, _ = backends.build_command(config, run_dir, port, base_env={}, uuids=uuids)
        env = environment.run_env(config, run_dir, None, os.environ.get("PYTHONPATH"), uuids)
        sbatch = backends.of(config).job_script(config, run_dir)
        return newrun.Program(argv, env, other_node_commands(config, run_dir), sbatch)

    with_varied = {} if varied is None else {"varied": varied}
    if config.kind == SCRIPT:
        stem, own = script_stem(config), {"kind": {"kind": SCRIPT}, "where": {"cwd": config.cwd}}
        own["after"] = with_varied or None
    else:
        stem = config.name or config.model
        own = {"after": {"scaling": scaling, "resumed_from": resumed_from} | with_varied}
    run_dir = newrun.create(
        root, config, stem, program, recorded_on=recorded_on, sweep_id=sweep_id, **own
    )
    return run_dir.name


def problems_here(config: RunConfig, usable: tuple[int, ...]) -> list[ConfigError]:
    """Every problem with ``config`` on this machine (its ``usable`` GPUs), for either kind of
    run: a trainer run's checks with the pre-flight's refusals, or a script run's own
    (``script.problems``: the script, its folders, and where it runs)."""
    if config.kind == SCRIPT:
        return script.problems(config, usable)
    return problems(config, usable, machine_facts(config))


def ready(config: RunConfig) -> RunConfig:
    """``config`` as its run folder records it: paths made absolute, defaults filled in."""
    return script.normalized(config) if config.kind == SCRIPT else normalized(config)


def _record_without_supervisor(run_dir: Path, status: dict, state: str, **fields) -> None:
    """Write a run's status.json from the launcher: only where no supervisor exists to write it.

    The supervisor is status.json's writer. The launcher writes it at two ends of a run no
    supervisor will record: the supervisor never came up (``failed``, so the run does not sit in
    ``queued`` until it is declared lost), and ``stop`` of a run whose supervisor is gone or did not
    answer (``stopped``)."""
    write_json_atomic(
        run_dir / STATUS_JSON,
        dict(
            status,
            state=state,
            ended_at=status.get("ended_at") or now_iso(),
            updated_at=now_iso(),
            **fields,
        ),
    )


def _spawn_supervisor(
    args: list[str], log_path: Path, module: str = _SUPERVISOR, extra: dict | None = None
) -> spawn.Popen:
    for p in list(_children):
        if p.poll() is not None:
            _children.remove(p)
    env = dict(os.environ, **(extra or {}))
    env["PYTHONPATH"] = str(REPO_ROOT) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    p = spawn.start([sys.executable, "-m", module, *args], log_path, cwd=REPO_ROOT, env=env)
    _children.append(p)
    return p


def start_command(args: list[str], log_path: Path, runs_root: Path) -> spawn.Popen:
    """``python -m lab ARGS`` detached, on ``runs_root`` (a page's long command: ``noise``)."""
    return _spawn_supervisor(args, log_path, "lab", {"LAB_RUNS_DIR": str(runs_root)})


def _wait_up(p: spawn.Popen, run_dir: Path, log_path: Path) -> None:
    def up() -> bool:
        st = read_status(run_dir)
        return st.state not in (None, QUEUED) or bool(st.supervisor_pid) or p.poll() is not None

    procs.wait_until(up, _UP_TIMEOUT_S)
    st = read_status(run_dir)
    why = None
    if p.poll() is not None and st.state in (None, QUEUED):
        tail = (
            log_path.read_text(errors="replace").strip().splitlines()[-1:]
            if log_path.exists()
            else []
        )
        output = " ".join(tail) or "no output"
        why = f"the supervisor exited before starting the run ({output}): see {log_path}"
    elif not (st.state not in (None, QUEUED) or st.supervisor_pid):
        why = f"the supervisor did not start within {_UP_TIMEOUT_S:.0f} s: see {log_path}"
        p.kill()
    if why:
        diagnosis = supervisor_failure(
            why, "read the supervisor log, fix what it names, launch again", p.poll()
        )
        _record_without_supervisor(run_dir, st.data, FAILED, diagnosis=diagnosis.to_dict())
        raise LaunchError(why)


def start_supervisor(run_dir: Path | str) -> None:
    """Start the background supervisor of a run folder whose run.json is written; return once it is
    up.

    ``launch`` calls it for the folder it made; a folder written by other
    means (a test's, a script's) runs the same way. The watcher is the backend's
    (run.json's config ``backend``). Raises ``LaunchError`` when it does not come
    up, or its start was refused (Slurm did not take the job: the run is then
    recorded failed, with why).
    """
    run_dir = Path(run_dir)
    log_path = run_dir / SUPERVISOR_LOG
    backend = backends.of(_config_of(run_dir))
    _wait_up(_spawn_supervisor([str(run_dir)], log_path, backend.watcher), run_dir, log_path)
    refused = backend.refusal(run_dir)
    if refused:
        raise LaunchError(refused)


def _config_of(run_dir: Path) -> dict[str, Any]:
    """run.json's ``config`` of a run folder (empty when unreadable)."""
    return read_run(run_dir).config or {}


def launch(
    config: RunConfig,
    runs_dir: Path | None = None,
    *,
    resumed_from: str | None = None,
    exclusive: bool = False,
    wait_for_idle: bool = False,
) -> str:
    """Validate, create the run folder, start the supervisor; return the run id once it is up.

    ``resumed_from``: the run whose checkpoint ``config.resume`` names
    (``lab.engine.launch.resume``), kept in run.json. ``exclusive``: the queue starts it only when
    no other lab run runs (``lab.engine.queue``); ``wait_for_idle``: and then only once no foreign
    work holds its GPUs or the CPU (``lab.engine.queue.idle``). Either kind of run: a user's
    script too."""
    usable, recorded_on = newrun.machine()
    found = problems_here(config, usable)  # the pre-flight's refusals too: nothing starts
    if found:
        raise found[0]
    root = root_or_default(runs_dir)
    where = backends.of(config).where(config, recorded_on)
    run_id = new_run(ready(config), root, None, where, resumed_from=resumed_from)
    if exclusive:
        queue_book.ask_exclusive(root / run_id)
    if wait_for_idle:
        queue_book.ask_idle(root / run_id)
    start_supervisor(root / run_id)
    return run_id


def start_sweep(
    root: Path, sweep_id: str, run_ids: list[str], scaling: str | list[str | None] | None
) -> None:
    """Write the sweep's record and start its one supervisor over run folders already made (a
    trainer's or a script's: ``lab.engine.launch.sweeps.launch_sweep``); return once it is up."""
    sweep_file = sweep_record.write(root, sweep_id, run_ids, scaling)
    log_path = sweep_record.path(root, sweep_id, ".log")
    _wait_up(_spawn_supervisor(["--sweep", str(sweep_file)], log_path), root / run_ids[0], log_path)


# ---- stopping -------------------------------------------------------------


def request_stop(run_dir: Path, grace_s: float) -> None:
    """Ask the run's supervisor to stop it (a ``stop.request`` file it polls)."""
    write_json_atomic(run_dir / STOP_REQUEST, {"grace_s": grace_s, "at": now_iso()})


def stop(run_id: str, runs_dir: Path | None = None, grace_s: float = 5) -> str:
    """Stop a run (SIGTERM to its processes, SIGKILL after ``grace_s``); return its final state.

    A finished run is left as it is (its state is returned). A queued run is
    cancelled before it starts. A run whose supervisor is gone (``lost``) has
    its recorded processes ended here, and is recorded ``stopped``.
    """
    root = root_or_default(runs_dir)
    run_dir = Path(registry.get_run(run_id, root).run_dir)
    st = registry.status_record(run_dir)
    if st.state in ENDED_STATES:
        return st.state
    request_stop(run_dir, grace_s)  # also keeps a supervisor that comes up late from starting it
    if st.state != LOST and procs.alive(st.supervisor_pid, st.supervisor_ct):
        if procs.wait_until(
            lambda: is_final(registry.status_record(run_dir).state), grace_s + 10, 0.1
        ):
            st = registry.status_record(run_dir)
            if st.state in ENDED_STATES:
                return st.state
    # no supervisor to do it (gone, or it did not answer): end what was recorded ourselves
    st = read_status(run_dir).data
    procs.end_recorded(st, grace_s)
    backends.of(_config_of(run_dir)).end_leftover(st)
    _record_without_supervisor(run_dir, st, STOPPED)
    return STOPPED


def request_stacks(run_id: str, runs_dir: Path | None = None) -> Path:
    """Ask a running run's supervisor for every rank's stack now (a ``stacks.request`` file it
    polls, as it polls ``stop.request``); return the run folder. Its answer is status.json's
    ``stacks``."""
    rec = registry.get_run(run_id, root_or_default(runs_dir))
    if rec.state not in (STARTING, RUNNING):
        raise LaunchError(f"run {run_id} is {rec.state}: only a running run has stacks to take")
    write_json_atomic(Path(rec.run_dir) / STACKS_REQUEST, {"at": now_iso()})
    return Path(rec.run_dir)


def wait(run_id: str, runs_dir: Path | None = None, timeout_s: float = 600) -> str:
    """Block until the run reaches a final state (or ``timeout_s``); return the state."""
    end = time.monotonic() + timeout_s
    while True:
        state = registry.get_run(run_id, runs_dir).state
        if is_final(state) or time.monotonic() > end:
            return state
        time.sleep(0.2)
