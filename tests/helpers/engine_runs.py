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


def wait_ranks(run_dir: Path, n: int, timeout_s: float = 60) -> dict[int, int]:
    """rank -> pid once the run's tree holds ``n`` ranks that have started training."""

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
        return found if len(found) == n and (run_dir / "progress.json").exists() else None

    return wait_for(ranks, timeout_s, f"{n} training ranks")
