"""Waits on real runs of the engine: their state, their ranks, their processes; a small config."""

from __future__ import annotations

import time
from pathlib import Path

import psutil

from lab.engine import procs, registry
from lab.engine.spec.run import RunConfig
from lab.runfolder import read_json


def cfg(**kw) -> RunConfig:
    base = dict(
        max_steps=3,
        image_size=8,
        batch_size=32,
        log_every=1,
        checkpoint="none",
        extra_env={"OMP_NUM_THREADS": "1"},
    )
    base.update(kw)
    return RunConfig(**base)


def wait_for(pred, timeout_s: float, what: str):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def state(run_id: str, root: Path) -> str:
    return registry.get_run(run_id, root).state


def alive_of(run_dir: Path) -> list[int]:
    """Every process of the run still alive: recorded pids (create time checked) and their
    children."""
    st = read_json(run_dir / "status.json") or {}
    recorded = [
        [st.get("supervisor_pid"), st.get("supervisor_ct")],
        [st.get("pid"), st.get("pid_ct")],
    ]
    recorded += st.get("tree") or []
    out = set()
    for pid, ct in recorded:
        for p in procs.tree(pid, ct):
            out.add(p.pid)
    return sorted(out)


def sleeper(runs_dir: Path, seconds: float = 600) -> str:
    """The path of a user's script that imports nothing and sleeps ``seconds``: a run for the tests
    whose subject is the process tree (stop, kill, adopt, queue, ports), not training, at a
    hundredth of a trainer's CPU (each trainer process imports torch: about 5 s of CPU here). It
    lies beside ``runs_dir``, not in it, so the supervisor's walk of a script's folder for event
    files never walks the runs."""
    p = runs_dir.parent / "sleeper" / f"sleep_{seconds:g}.py"
    p.parent.mkdir(exist_ok=True)
    p.write_text(f"import time\ntime.sleep({seconds})\n")
    return str(p)


def wait_ranks(
    run_dir: Path, n: int, timeout_s: float = 60, trained: bool = True
) -> dict[int, int]:
    """rank -> pid once the run's tree holds ``n`` torchrun ranks that have started training (the
    trainer's progress.json exists; a script's ranks only ``trained=False``)."""

    def ranks():
        st = read_json(run_dir / "status.json") or {}
        found = {}
        for p in procs.tree(st.get("pid"), st.get("pid_ct")):
            try:
                env = p.environ()
            except psutil.Error:
                continue
            if "RANK" in env and "TORCHELASTIC_RUN_ID" in env:
                found[int(env["RANK"])] = p.pid
        started = not trained or (run_dir / "progress.json").exists()
        return found if len(found) == n and started else None

    return wait_for(ranks, timeout_s, f"{n} training ranks")
