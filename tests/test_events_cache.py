"""The event cache (``lab.events.cache``): an accelerator only.

Same points with and without it, a warm read decodes no record, a file that grew is read from
its cached offset, a truncated or corrupt entry is ignored and rewritten, the cache folder is
never a run, and ``cache=False`` / ``LAB_EVENTS_CACHE=0`` bypass it. conftest.py points
``LAB_EVENTS_CACHE_DIR`` at a temporary folder; the placement tests unset it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from lab import events
from lab.events import cache, decode, tfrecord
from lab.events.cache import CACHE_DIRNAME, SUFFIX
from lab.runfolder import SAMPLE_RUNS
from tests.helpers.event_records import header, rec

OLD = 1_600_000_000  # an mtime long past: the entry is trusted without reading the file


def write_run(d: Path, steps: range, tags=("train/loss", "train/acc", "perf/x"), old=True):
    d.mkdir(parents=True, exist_ok=True)
    f = d / "events.out.tfevents.1.host"
    data = b"".join(rec(t, s, s * 0.5 + i) for s in steps for i, t in enumerate(tags))
    f.write_bytes((header() if steps.start == 0 else b"") + data)
    if old:
        os.utime(f, (OLD, OLD))
    return f


def snapshot(reader: events.LogdirReader) -> dict:
    reader.refresh()
    return {
        run: {t: (s.step.copy(), s.wall_time.copy(), s.value.copy()) for t, s in sc.items()}
        for run in reader.run_names()
        for sc in [reader.scalars(run)]
    }


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[r].keys() == b[r].keys()
        and all(np.array_equal(x, y) for t in a[r] for x, y in zip(a[r][t], b[r][t]))
        for r in a
    )


def entries() -> list[Path]:
    return sorted(Path(os.environ["LAB_EVENTS_CACHE_DIR"]).rglob("*" + SUFFIX))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("LAB_EVENTS_CACHE_DIR", str(d))
    return d


@pytest.fixture
def count_scans(monkeypatch):
    """Bytes handed to the record scanners, per file (alone or in a batch of small files)."""
    seen: list[int] = []
    real, real_many = tfrecord.scan, tfrecord.scan_many

    def scan(buf):
        seen.append(len(buf))
        return real(buf)

    def scan_many(bufs):
        ms = real_many(bufs)
        seen.extend(len(b) for b, ok in zip(bufs, ms.clean) if ok)  # the others: scan() next
        return ms

    monkeypatch.setattr(tfrecord, "scan", scan)
    monkeypatch.setattr(tfrecord, "scan_many", scan_many)
    return seen


def test_warm_read_same_points_and_decodes_nothing(tmp_path, cache_dir, count_scans):
    for k in range(3):
        write_run(tmp_path / "logs" / f"run{k}", range(0, 200 + k))
    logs = tmp_path / "logs"
    plain = snapshot(events.LogdirReader(logs, cache=False))
    assert entries() == [] and len(count_scans) == 3
    cold = snapshot(events.LogdirReader(logs))
    assert len(entries()) == 3
    count_scans.clear()
    warm = snapshot(events.LogdirReader(logs))
    assert count_scans == [] and same(plain, cold) and same(plain, warm)
    for f in entries():
        f.unlink()  # deleting the cache changes nothing
    assert same(plain, snapshot(events.LogdirReader(logs)))


@pytest.mark.proc
def test_sample_runs_read_the_same_from_the_cache(cache_dir):
    plain = events.LogdirReader(SAMPLE_RUNS, cache=False)
    want = snapshot(plain)
    cold = events.LogdirReader(SAMPLE_RUNS)
    assert same(want, snapshot(cold)) and entries()
    warm = events.LogdirReader(SAMPLE_RUNS)
    assert same(want, snapshot(warm))
    assert warm.warnings == cold.warnings == plain.warnings


def test_env_turns_it_off(tmp_path, cache_dir, monkeypatch):
    write_run(tmp_path / "run", range(0, 50))
    monkeypatch.setenv("LAB_EVENTS_CACHE", "0")
    events.LogdirReader(tmp_path).refresh()
    events.RunReader(tmp_path / "run").refresh()
    assert entries() == []


def test_grown_file_reads_only_new_bytes(tmp_path, cache_dir, count_scans):
    f = write_run(tmp_path / "run", range(0, 100))
    size = f.stat().st_size
    events.LogdirReader(tmp_path).refresh()
    with open(f, "ab") as fh:
        fh.write(b"".join(rec("train/loss", s, -1.0) for s in range(100, 130)))
    count_scans.clear()
    warm = snapshot(events.LogdirReader(tmp_path))
    assert count_scans == [f.stat().st_size - size]
    assert same(warm, snapshot(events.LogdirReader(tmp_path, cache=False)))
    assert len(warm["run"]["train/loss"][0]) == 130
    count_scans.clear()  # the entry moved to the new offset
    assert same(warm, snapshot(events.LogdirReader(tmp_path))) and count_scans == []


def test_live_refreshes_keep_the_entry_up(tmp_path, cache_dir):
    f = write_run(tmp_path / "run", range(0, 10), old=False)
    r = events.RunReader(tmp_path / "run")
    r.refresh()
    for start in range(10, 100, 10):
        with open(f, "ab") as fh:
            fh.write(b"".join(rec("train/loss", s, 1.0) for s in range(start, start + 10)))
        r.refresh()
    want = snapshot(events.LogdirReader(tmp_path, cache=False))
    assert same(want, snapshot(events.LogdirReader(tmp_path)))


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_damaged_entry_is_ignored_and_rewritten(tmp_path, cache_dir, count_scans, damage):
    write_run(tmp_path / "run", range(0, 300))
    want = snapshot(events.LogdirReader(tmp_path))
    (entry,) = entries()
    good = entry.read_bytes()
    bad = {
        "truncate": good[: len(good) // 2],
        "flip": good[:-100] + bytes([good[-100] ^ 1]) + good[-99:],
        "garbage": b"\x93NUMPY" + os.urandom(500),
        "empty": b"",
    }[damage]
    entry.write_bytes(bad)
    count_scans.clear()
    assert same(want, snapshot(events.LogdirReader(tmp_path)))
    assert len(count_scans) == 1  # read from the file again
    assert entry.read_bytes() == good or cache.decode(entry.read_bytes()) is not None
    count_scans.clear()
    assert same(want, snapshot(events.LogdirReader(tmp_path))) and count_scans == []


def test_rewritten_file_is_not_read_from_the_cache(tmp_path, cache_dir):
    f = write_run(tmp_path / "run", range(0, 100))
    events.LogdirReader(tmp_path).refresh()
    data = f.read_bytes()
    f.write_bytes(data[:200] + bytes([data[200] ^ 0xFF]) + data[201:])  # same size and mtime
    os.utime(f, (OLD, OLD + 1))
    want = snapshot(events.LogdirReader(tmp_path, cache=False))
    assert same(want, snapshot(events.LogdirReader(tmp_path)))
    f.write_bytes(b"".join(rec("other", s, 2.0) for s in range(150)))  # longer, new start
    want = snapshot(events.LogdirReader(tmp_path, cache=False))
    assert list(want["run"]) == ["other"]
    assert same(want, snapshot(events.LogdirReader(tmp_path)))


def test_warnings_and_plugins_come_back(tmp_path, cache_dir, count_scans):
    f = write_run(tmp_path / "run", range(0, 20))
    data = bytearray(f.read_bytes())
    data[-3] ^= 0xFF  # the last record's payload CRC fails
    f.write_bytes(bytes(data))
    os.utime(f, (OLD, OLD))
    cold = events.RunReader(tmp_path / "run")
    cold.refresh()
    warm = events.RunReader(tmp_path / "run")
    warm.refresh()
    assert cold.warnings and warm.warnings == cold.warnings
    assert warm.scalars().keys() == cold.scalars().keys()
    other = f"{tmp_path}/./run"  # the same file by another spelling: its warnings name that one
    plain, warm = events.RunReader(other, cache=False), events.RunReader(other)
    plain.refresh()
    count_scans.clear()
    warm.refresh()
    assert count_scans == [] and warm.warnings == plain.warnings != cold.warnings


def test_in_the_runs_folder_the_cache_sits_beside_the_files(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    monkeypatch.setenv("LAB_RUNS_DIR", str(runs))
    monkeypatch.delenv("LAB_EVENTS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    write_run(runs / "r1" / "tb", range(0, 30))
    write_run(runs / "r1" / "sys", range(0, 30), tags=("sys/cpu_pct",))
    r = events.LogdirReader(runs)
    r.refresh()
    assert sorted(p.relative_to(runs).parent.as_posix() for p in runs.rglob("*" + SUFFIX)) == [
        f"r1/sys/{CACHE_DIRNAME}",
        f"r1/tb/{CACHE_DIRNAME}",
    ]
    assert not any("tfevents" in p.name for p in runs.rglob("*" + SUFFIX))
    assert events.discover(runs) == ["r1/sys", "r1/tb"]
    assert r.run_names() == ["r1/sys", "r1/tb"]
    r.refresh()
    assert r.run_names() == ["r1/sys", "r1/tb"]
    assert not (tmp_path / "xdg").exists()
    # a foreign folder: the user cache folder, keyed by its absolute path
    write_run(tmp_path / "foreign" / "a", range(0, 30))
    events.LogdirReader(tmp_path / "foreign").refresh()
    assert len(list((tmp_path / "xdg" / "parallel-training-lab").rglob("*" + SUFFIX))) == 1
    assert not list((tmp_path / "foreign").rglob("*" + SUFFIX))


def test_read_only_run_folder_uses_the_user_cache(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    monkeypatch.setenv("LAB_RUNS_DIR", str(runs))
    monkeypatch.delenv("LAB_EVENTS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    write_run(runs / "r1" / "tb", range(0, 30))
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if "r1" in str(p) else real_access(p, m))
    events.LogdirReader(runs).refresh()
    assert not (runs / "r1" / "tb" / CACHE_DIRNAME).exists()
    assert len(list((tmp_path / "xdg").rglob("*" + SUFFIX))) == 1


def test_unwritable_cache_folder_reads_uncached(tmp_path, monkeypatch):
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("LAB_EVENTS_CACHE_DIR", str(tmp_path / "not-a-folder" / "x"))
    write_run(tmp_path / "logs" / "run", range(0, 30))
    r = events.LogdirReader(tmp_path / "logs")
    want = snapshot(events.LogdirReader(tmp_path / "logs", cache=False))
    assert same(want, snapshot(r)) and r.warnings == []


def test_recent_file_is_checked_against_its_start(tmp_path, cache_dir, monkeypatch):
    """An entry read within 2 s of the file's last change is trusted only after a head check."""
    f = write_run(tmp_path / "run", range(0, 40), old=False)
    events.LogdirReader(tmp_path).refresh()
    calls = []
    real = decode.decode
    monkeypatch.setattr(decode, "decode", lambda *a: calls.append(1) or real(*a))
    mtime = f.stat().st_mtime_ns
    data = f.read_bytes()
    f.write_bytes(bytes([data[0] ^ 1]) + data[1:])  # same size, maybe the same mtime tick
    os.utime(f, ns=(mtime, mtime))
    want = snapshot(events.LogdirReader(tmp_path, cache=False))
    assert same(want, snapshot(events.LogdirReader(tmp_path))) and calls
