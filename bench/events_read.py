"""Event file reading: lab.events against TensorBoard's EventAccumulator and tbparse.

Measured side by side in one process, one run folder, CRCs checked by all:

1. a 200,000-scalar file written by torch's SummaryWriter (10 tags x 20,000
   steps): full read, median of N, scalars/s for ours, EventAccumulator
   (size_guidance scalars=0, i.e. keep every point) and tbparse, and ratios;
2. a refresh after 100 scalars are appended to that file, against a full
   re-read of it;
3. a 2,000,000-scalar file in the same proportion, written by our own
   writer of real TensorBoard records (SummaryWriter would take minutes;
   a 20,000-record sample from the same writer is checked against
   EventAccumulator first): read rate and array bytes per point;
4. many small files: a runs folder of ``--runs`` run folders (default 2,000: 1,000 lab
   runs, each a ``tb/`` of 6 tags x 200 steps and a ``sys/`` of 4 tags x 300 samples, i.e.
   1,200 points a file, by our record writer), read by a fresh ``LogdirReader`` three ways,
   alternated, median and spread of ``--repeats``: uncached (``cache=False``), cold (the
   event cache deleted first, so its entries are written) and warm (the cache present);
5. with ``--tensorboard`` (only that): whole processes from their start until every run's
   series is answered, the lab cold (cache deleted) and warm against TensorBoard's Rust data
   server (``tensorboard --load_fast=true``), on few big runs (6 x 200,000 scalars) and on
   the ``--runs`` folder, alternated, median of ``--repeats`` (``bench/tb_race.py``).

Generated files are cached under /tmp/lab_bench_events. Run:
``python bench/events_read.py`` (about 2-3 minutes on 2 busy cores), or only the
many-small-files shape: ``python bench/events_read.py --many-only --runs 2000``, or the
race: ``python bench/events_read.py --tensorboard --runs 2000 --repeats 3`` (about 4 minutes).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lab import events  # noqa: E402
from lab.events.tfrecord import frame  # noqa: E402

CACHE = Path("/tmp/lab_bench_events")
TAGS = [
    "train/loss",
    "train/acc",
    "train/lr",
    "train/grad_norm",
    "perf/samples_per_sec",
    "perf/step_time_ms",
    "perf/data_time_ms",
    "val/loss",
    "val/acc",
    "mem/cuda0/peak_mib",
]


def value(tag_i: int, step: int) -> float:
    return math.exp(-step / 5000) * (tag_i + 1) + 0.01 * math.sin(step * 0.1 + tag_i)


def summarywriter_file(steps: int) -> Path:
    d = CACHE / f"summarywriter_{len(TAGS) * steps}"
    if not any(d.glob("events.out.tfevents.*")):
        from torch.utils.tensorboard import SummaryWriter

        shutil.rmtree(d, ignore_errors=True)
        t = time.perf_counter()
        w = SummaryWriter(str(d), max_queue=1000)
        for step in range(steps):
            for i, tag in enumerate(TAGS):
                w.add_scalar(tag, value(i, step), step)
        w.close()
        print(f"wrote {d} with SummaryWriter in {time.perf_counter() - t:.1f} s", flush=True)
    return d


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def fast_records(first_step: int, steps: int, wall0: float = 1_764_000_000.0, names=TAGS):
    """The exact bytes SummaryWriter writes for ``add_scalar`` (simple_value), framed."""
    tags = [t.encode() for t in names]
    yield (
        frame(b"\x09" + struct.pack("<d", wall0) + b"\x1a\x0dbrain.Event:2")
        if first_step == 0
        else b""
    )
    for step in range(first_step, first_step + steps):
        wall = struct.pack("<d", wall0 + step * 0.01)
        head = b"\x09" + wall + (b"\x10" + _varint(step) if step else b"")
        for i, tag in enumerate(tags):
            val = b"\x0a" + bytes([len(tag)]) + tag + b"\x15" + struct.pack("<f", value(i, step))
            summ = b"\x0a" + bytes([len(val)]) + val
            yield frame(head + b"\x2a" + bytes([len(summ)]) + summ)


def fast_file(steps: int) -> Path:
    d = CACHE / f"fastwriter_{len(TAGS) * steps}"
    f = d / "events.out.tfevents.1764000000.bench.0.0"
    if not f.exists():
        d.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        with open(f.with_suffix(".tmp"), "wb") as fh:
            fh.write(b"".join(fast_records(0, steps)))
        f.with_suffix(".tmp").rename(f)
        print(f"wrote {f} with our record writer in {time.perf_counter() - t:.1f} s", flush=True)
    return d


def validate_fast_writer() -> None:
    """EventAccumulator reads the same points from a sample of our writer as we do."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with tempfile.TemporaryDirectory() as d:
        Path(d, "events.out.tfevents.1.sample").write_bytes(b"".join(fast_records(0, 2000)))
        ea = EventAccumulator(d, size_guidance={"scalars": 0})
        ea.Reload()
        r = events.RunReader(d)
        r.refresh()
        ours = r.scalars()
        assert sorted(ea.Tags()["scalars"]) == sorted(ours) == sorted(TAGS)
        for tag in TAGS:
            theirs = [(e.step, e.wall_time, e.value) for e in ea.Scalars(tag)]
            s = ours[tag]
            assert theirs == list(zip(s.step.tolist(), s.wall_time.tolist(), s.value.tolist())), tag
    print(
        "our record writer: a 20,000-scalar sample reads the same in EventAccumulator and "
        "lab.events"
    )


def timed(fn, repeats: int) -> tuple[float, int]:
    times, n = [], 0
    for _ in range(repeats):
        t = time.perf_counter()
        n = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), n


def ours(d: Path) -> int:
    r = events.RunReader(d)
    r.refresh()
    assert not r.warnings, r.warnings
    return sum(len(s) for s in r.scalars().values())


def event_accumulator(d: Path) -> int:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(d), size_guidance={"scalars": 0})
    ea.Reload()
    return sum(len(ea.Scalars(t)) for t in ea.Tags()["scalars"])


def tbparse(d: Path) -> int:
    from tbparse import SummaryReader

    return len(SummaryReader(str(d), extra_columns={"wall_time"}).scalars)


def refresh_bench(src: Path, repeats: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / next(src.glob("events.out.tfevents.*")).name
        shutil.copy(next(src.glob("events.out.tfevents.*")), f)
        r = events.RunReader(tmp)
        t = time.perf_counter()
        n0 = r.refresh()
        full = time.perf_counter() - t
        times = []
        step = max(int(s.step[-1]) for s in r.scalars().values()) + 1
        # the new points continue the file in time, as a live writer's would
        wall0 = max(float(s.wall_time[-1]) for s in r.scalars().values()) + 1 - step * 0.01
        for _ in range(repeats):
            with open(f, "ab") as fh:
                # 10 steps x 10 tags = 100 scalars
                fh.write(b"".join(fast_records(step, 10, wall0)))
            step += 10
            t = time.perf_counter()
            got = r.refresh()
            times.append(time.perf_counter() - t)
            assert got == 100, got
        inc = statistics.median(times)
        print(
            f"refresh after 100 appended scalars: {inc * 1000:.2f} ms (median of {repeats}); "
            f"full read of the {n0:,}-scalar file: {full * 1000:.0f} ms; ratio {full / inc:.0f}x"
        )


TB_TAGS = ["train/loss", "train/acc", "train/lr", "perf/samples_per_sec", "val/loss", "val/acc"]
SYS_TAGS = ["sys/gpu0/util_pct", "sys/gpu0/mem_used_mib", "sys/cpu_pct", "sys/rss_mib"]


def many_folder(runs: int) -> Path:
    """``runs`` run folders (``<lab run>/tb`` and ``<lab run>/sys``), 1,200 points a file."""
    d = CACHE / f"many_{runs}"
    done = d / ".complete"
    if not done.exists():
        shutil.rmtree(d, ignore_errors=True)
        t = time.perf_counter()
        for i in range(-(-runs // 2)):
            for part, tags, steps in (("tb", TB_TAGS, 200), ("sys", SYS_TAGS, 300)):
                if 2 * i + (part == "sys") >= runs:
                    continue
                f = d / f"run{i:05d}" / part / f"events.out.tfevents.{1764000000 + i}.bench.1.0"
                f.parent.mkdir(parents=True)
                f.write_bytes(b"".join(fast_records(0, steps, 1_764_000_000.0 + i, tags)))
        done.write_text("")
        print(f"wrote {runs:,} run folders in {d} in {time.perf_counter() - t:.1f} s", flush=True)
        time.sleep(2.5)  # as a lab's finished runs: not modified just before they are read
    return d


def drop_cache(d: Path) -> None:
    for c in [*d.glob("*/.lab-cache"), *d.glob("*/*/.lab-cache")]:
        shutil.rmtree(c)


def big_runs_folder(runs: int = 6, steps: int = 20_000) -> Path:
    """``runs`` run folders of one file each: 10 tags x ``steps`` steps (200,000 scalars)."""
    d = CACHE / f"big_{runs}x{len(TAGS) * steps}"
    done = d / ".complete"
    if not done.exists():
        shutil.rmtree(d, ignore_errors=True)
        for i in range(runs):
            f = d / f"run{i}" / f"events.out.tfevents.{1764000000 + i}.bench.0.0"
            f.parent.mkdir(parents=True)
            f.write_bytes(b"".join(fast_records(0, steps, 1_764_000_000.0 + i)))
        done.write_text("")
        time.sleep(2.5)  # finished runs: not modified just before they are read
    return d


def tensorboard_bench(runs: int, repeats: int) -> None:
    """Whole processes: the lab cold and warm against TensorBoard's data server, both shapes."""
    from bench import tb_race

    if not tb_race.data_server_present():
        print("tensorboard_data_server's binary is missing: no data-server comparison")
        return
    big_steps = 20_000
    big = big_runs_folder(6, big_steps)
    expect = {f"run{i}": {t: big_steps - 1 for t in TAGS} for i in range(6)}
    tb_race.race("few big runs", big, expect, 6 * len(TAGS) * big_steps, repeats, drop_cache)
    if not runs:  # --runs 0: the few-big-runs shape alone
        return
    many = many_folder(runs)
    expect = {}
    for i in range(-(-runs // 2)):
        for part, tags, steps in (("tb", TB_TAGS, 200), ("sys", SYS_TAGS, 300)):
            if 2 * i + (part == "sys") < runs:
                expect[f"run{i:05d}/{part}"] = {t: steps - 1 for t in tags}
    points = sum(len(t) * (last + 1) for t in expect.values() for last in [next(iter(t.values()))])
    tb_race.race("many small runs", many, expect, points, repeats, drop_cache)


def read_many(d: Path, cache: bool) -> tuple[float, float, int]:
    """Wall and CPU seconds of a fresh reader's first refresh, and its points."""
    c, t = time.process_time(), time.perf_counter()
    r = events.LogdirReader(d, cache=cache)
    n = r.refresh()
    dt, dc = time.perf_counter() - t, time.process_time() - c
    assert not r.warnings, r.warnings[:3]
    return dt, dc, n


def many_bench(runs: int, repeats: int) -> None:
    d = many_folder(runs)
    os.environ["LAB_RUNS_DIR"] = str(d)  # the lab's runs folder: entries beside the files
    os.environ.pop("LAB_EVENTS_CACHE_DIR", None)
    os.environ.pop("LAB_EVENTS_CACHE", None)
    ways = ("uncached", "cold", "warm")
    wall: dict[str, list[float]] = {k: [] for k in ways}
    cpu: dict[str, list[float]] = {k: [] for k in ways}
    points = set()
    for _ in range(repeats):
        for way in ways:
            if way == "cold":
                drop_cache(d)
            dt, dc, n = read_many(d, way != "uncached")
            wall[way].append(dt)
            cpu[way].append(dc)
            points.add(n)
    assert len(points) == 1, points
    print(f"many small files: {runs:,} run folders, {points.pop():,} points, median of {repeats}")
    for name, times in (("wall", wall), ("cpu", cpu)):
        med = {k: statistics.median(v) for k, v in times.items()}
        for k, v in times.items():
            spread = ", ".join(f"{x:.3f}" for x in v)
            print(f"  {name} {k:9s} {med[k]:7.3f} s  (each: {spread})")
        cold, warm, plain = med["cold"], med["warm"], med["uncached"]
        print(
            f"  {name}: cold / warm {cold / warm:.1f}x; uncached / warm {plain / warm:.1f}x; "
            f"cold / uncached {cold / plain:.2f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--steps", type=int, default=20_000, help="steps of the SummaryWriter file (x10 tags)"
    )
    ap.add_argument(
        "--big-steps",
        type=int,
        default=200_000,
        help="steps of the big file (x10 tags); 0 skips it",
    )
    ap.add_argument("--runs", type=int, default=2000, help="run folders of the many-files shape")
    ap.add_argument("--many-only", action="store_true", help="only the many-small-files shape")
    ap.add_argument(
        "--tensorboard",
        action="store_true",
        help="only the whole-process race against TensorBoard's data server (--load_fast=true)",
    )
    args = ap.parse_args()
    if args.tensorboard:
        tensorboard_bench(args.runs, args.repeats)
        return
    if args.many_only:
        many_bench(args.runs, args.repeats)
        return
    d = summarywriter_file(args.steps)
    size = sum(f.stat().st_size for f in d.glob("events.out.tfevents.*"))
    print(f"file: {d} ({size / 1e6:.1f} MB), median of {args.repeats} full reads")
    rates = {}
    for name, fn in (
        ("lab.events", ours),
        ("EventAccumulator", event_accumulator),
        ("tbparse", tbparse),
    ):
        t, n = timed(lambda fn=fn: fn(d), args.repeats)
        rates[name] = n / t
        print(f"  {name:17s} {n:>9,} scalars in {t:7.3f} s = {n / t:>11,.0f} scalars/s", flush=True)
    for other in ("EventAccumulator", "tbparse"):
        print(f"  lab.events / {other}: {rates['lab.events'] / rates[other]:.1f}x")
    refresh_bench(d, args.repeats)
    if args.big_steps:
        validate_fast_writer()
        big = fast_file(args.big_steps)
        r = events.RunReader(big)
        t = time.perf_counter()
        n = r.refresh()
        dt = time.perf_counter() - t
        nbytes = r.nbytes()
        print(
            f"big file: {n:,} scalars in {dt:.2f} s = {n / dt:,.0f} scalars/s; "
            f"arrays {nbytes / 1e6:.1f} MB = {nbytes / n:.1f} bytes/point"
        )
    if args.runs:
        many_bench(args.runs, args.repeats)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    main()
