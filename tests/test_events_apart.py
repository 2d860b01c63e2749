"""Big runs read from scratch in forked workers (``lab.events.apart``) give the reader's own answer.

The reader runs in a fresh ``python -c`` process, as the CLI or a script would (one thread: the
only kind of process that forks workers), with the cache beside the files. Its points, order and
warnings must equal an uncached read in this process; the workers must really have read the big
runs (the call is counted), be gone when the refresh returns, and a second visit must restore
from the entries without forking again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from lab import events
from lab.events import apart, many
from tests.helpers.event_records import header, rec
from tests.helpers.event_snapshots import flip, snapshot

REPO = Path(__file__).resolve().parent.parent

CHILD = """
import json, sys
import psutil
sys.path.insert(0, {repo!r})
from lab.events import LogdirReader, apart
calls = []
real = apart.run_apart
def counted(fn, jobs, n):
    calls.append((len(jobs), n, real(fn, jobs, n)))
    return calls[-1][2]
apart.run_apart = counted
out = []
for visit in range(2):
    r = LogdirReader({root!r})
    r.refresh()
    snap = {{run: {{t: (s.step.tolist(), s.wall_time.tolist(), s.value.tolist())
                  for t, s in r.scalars(run).items()}} for run in r.run_names()}}
    out.append({{"snap": snap, "warnings": r.warnings, "calls": list(calls),
                "children": len(psutil.Process().children(recursive=True))}})
    calls.clear()
print(json.dumps(out))
"""


def big_file(tags: str, steps: int, offset: float = 0.0) -> bytes:
    return header() + b"".join(
        rec(t, s, s * 0.5 + k + offset) for s in range(steps) for k, t in enumerate(tags)
    )


def write_runs(root: Path) -> None:
    steps = many.SMALL // 16  # each file well past the small-file batch's limit
    (root / "big_a").mkdir()
    (root / "big_a" / "events.out.tfevents.1.h").write_bytes(big_file("ab", steps))
    (root / "big_b").mkdir()  # two files, the second damaged in the middle: a warning kept
    (root / "big_b" / "events.out.tfevents.1.h").write_bytes(big_file("a", steps, 1.0))
    damaged = big_file("c", steps, 2.0)
    (root / "big_b" / "events.out.tfevents.2.h").write_bytes(flip(damaged, len(damaged) // 2))
    (root / "big_c").mkdir()
    (root / "big_c" / "events.out.tfevents.1.h").write_bytes(big_file("abc", steps, 3.0))
    (root / "small").mkdir()  # read by the small-file batch, not by a worker
    (root / "small" / "events.out.tfevents.1.h").write_bytes(big_file("a", 50))


@pytest.mark.proc
def test_big_cold_runs_read_in_workers_equal_the_in_process_read(tmp_path):
    root = tmp_path / "logs"
    root.mkdir()
    write_runs(root)
    plain = events.LogdirReader(root, cache=False)
    plain.refresh()
    want, want_warnings = snapshot(plain), plain.warnings
    assert any("big_b" in w for w in want_warnings)  # the damage is seen

    env = {**os.environ, "LAB_RUNS_DIR": str(root)}  # cache entries beside the files
    for name in ("LAB_EVENTS_CACHE", "LAB_EVENTS_CACHE_DIR", "LAB_EVENTS_APART"):
        env.pop(name, None)
    code = CHILD.format(repo=str(REPO), root=str(root))
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    first, second = json.loads(res.stdout)
    cores = len(os.sched_getaffinity(0))
    if cores > 1:  # 3 cold big runs, one worker per core: every job done
        assert first["calls"] == [[3, min(3, cores), 3]]
    else:
        assert first["calls"] == []
    assert first["children"] == 0  # the workers ended with the refresh
    assert second["calls"] == []  # restored from the entries the workers wrote
    for visit in (first, second):
        got = {run: {t: tuple(c) for t, c in tags.items()} for run, tags in visit["snap"].items()}
        assert got == {run: {t: tuple(c) for t, c in tags.items()} for run, tags in want.items()}
        assert visit["warnings"] == want_warnings
    assert list((root / "big_a" / ".lab-cache").glob("*.evcache"))


def test_workers_only_in_a_one_thread_process_with_two_runs_or_more(monkeypatch):
    monkeypatch.delenv("LAB_EVENTS_APART", raising=False)
    monkeypatch.setattr(apart, "_cores", lambda: 8)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:  # another thread runs (as in the dashboard's server): a fork could deadlock
        assert apart.workers(4) == 0
    finally:
        stop.set()
        t.join()
    if threading.active_count() == 1:  # pytest's own plugins may run threads
        assert apart.workers(4) == 4
        assert apart.workers(40) == 8  # one a core
        monkeypatch.setattr(apart, "_cores", lambda: 64)
        assert apart.workers(40) == apart.MAX_WORKERS
        monkeypatch.setattr(apart, "_cores", lambda: 8)
    assert apart.workers(1) == 0
    monkeypatch.setattr(apart, "_cores", lambda: 1)
    assert apart.workers(4) == 0
    monkeypatch.setattr(apart, "_cores", lambda: 8)
    monkeypatch.setenv("LAB_EVENTS_APART", "0")
    assert apart.workers(4) == 0
