"""Whole processes side by side: the lab's reader against TensorBoard's Rust data server.

Used by ``python bench/events_read.py --tensorboard``. Each contender is a fresh process,
timed from its start until every run's series is answered:

- the lab: ``python -c`` that builds a ``LogdirReader``, refreshes it and touches every
  run's scalars (all points kept), printing how many points it holds;
- TensorBoard 2.x with ``--load_fast=true`` (its Rust ``tensorboard_data_server``), started
  in its own process group on a free port of 127.0.0.1; its HTTP API is polled
  (``/data/runs``, ``/data/plugin/scalars/tags``, then one ``scalars_multirun`` POST per
  tag) until every run lists every tag and each series ends at the run's last step
  (it keeps at most 1,000 points per tag: it is timed to its answer, not to all points).
  The group then gets SIGTERM, and SIGKILL if it lingers.

Nothing is downloaded: both read the folder on this machine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAB_SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from lab.events import LogdirReader
r = LogdirReader({logdir!r})
r.refresh()
print(sum(len(s) for run in r.run_names() for s in r.scalars(run).values()))
"""

Expect = dict[str, dict[str, int]]  # run -> tag -> last step


def lab_process(logdir: Path, env: dict[str, str]) -> tuple[float, int]:
    """Seconds from the process's start to every run's scalars in memory, and its points."""
    code = LAB_SCRIPT.format(root=str(ROOT), logdir=str(logdir))
    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return time.perf_counter() - t, int(out.stdout.split()[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, data: bytes | None = None):
    with urllib.request.urlopen(url, data=data, timeout=60) as resp:
        return json.loads(resp.read())


def _answered(base: str, expect: Expect) -> bool:
    """Every run and tag listed, and every series ending at its last step."""
    tags = _get(base + "/data/plugin/scalars/tags")
    if any(set(tags.get(run, {})) != set(want) for run, want in expect.items()):
        return False
    by_tag: dict[str, list[str]] = {}
    for run, want in expect.items():
        for tag in want:
            by_tag.setdefault(tag, []).append(run)
    for tag, runs in by_tag.items():
        form = urllib.parse.urlencode([("tag", tag)] + [("runs", r) for r in runs]).encode()
        got = _get(base + "/data/plugin/scalars/scalars_multirun", form)
        if any(not got.get(r) or got[r][-1][1] != expect[r][tag] for r in runs):
            return False
    return True


def tensorboard_process(logdir: Path, expect: Expect, limit_s: float = 300.0) -> float:
    """Seconds from TensorBoard's start to every run's series answered."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir)]
    cmd += ["--load_fast=true", "--port", str(port), "--host", "127.0.0.1"]
    t = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        while time.perf_counter() - t < limit_s:
            if proc.poll() is not None:
                raise RuntimeError(f"tensorboard exited with {proc.returncode}")
            try:
                if len(_get(base + "/data/runs")) >= len(expect) and _answered(base, expect):
                    return time.perf_counter() - t
            except OSError:  # not listening yet
                pass
            time.sleep(0.05)
        raise TimeoutError(f"tensorboard did not answer within {limit_s} s")
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def data_server_present() -> bool:
    """TensorBoard's ``tensorboard_data_server`` dependency (not imported: found) has its binary."""
    spec = importlib.util.find_spec("tensorboard_data_server")
    if spec is None or not spec.submodule_search_locations:
        return False
    return any(Path(d, "bin", "server").exists() for d in spec.submodule_search_locations)


def race(name: str, logdir: Path, expect: Expect, points: int, repeats: int, drop) -> None:
    """Lab cold, lab warm and the data server, alternated; medians, spreads and ratios."""
    env = dict(os.environ, LAB_RUNS_DIR=str(logdir))  # cache entries beside the files
    env.pop("LAB_EVENTS_CACHE_DIR", None)
    env.pop("LAB_EVENTS_CACHE", None)
    times: dict[str, list[float]] = {"lab cold": [], "lab warm": [], "data server": []}
    for _ in range(repeats):
        drop(logdir)
        dt, n = lab_process(logdir, env)
        assert n == points, (n, points)
        times["lab cold"].append(dt)
        dt, n = lab_process(logdir, env)
        assert n == points, (n, points)
        times["lab warm"].append(dt)
        times["data server"].append(tensorboard_process(logdir, expect))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{name}: {len(expect):,} runs, {points:,} points; whole processes, median of {repeats}")
    for k, v in times.items():
        print(f"  {k:11s} {med[k]:7.2f} s  (each: {', '.join(f'{x:.2f}' for x in v)})")
    tb = med["data server"]
    print(
        f"  data server / lab cold {tb / med['lab cold']:.2f}x (target >= 2); "
        f"data server / lab warm {tb / med['lab warm']:.2f}x (target >= 10)",
        flush=True,
    )
