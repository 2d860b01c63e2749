"""lab.events on files that are still being written: offsets, truncation, new files and runs,
merging.

Covers ``lab.events.file_loader`` (one file: ``EventFileLoader.load()``
yields only new points, resumes at a record cut short, classifies errors),
``lab.events.columns`` (growth, frozen snapshots, ranks merged in time) and
the incremental side of ``lab.events.reader``.
"""

from __future__ import annotations

import os

import numpy as np
from tensorboard.compat.proto import event_pb2
from tensorboard.util import tensor_util

from lab import events
from lab.events import decode
from lab.events.file_loader import EventFileLoader
from lab.events.tfrecord import frame
from tests.helpers.event_records import header, rec


def append(path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def points(series):
    return list(zip(series.step.tolist(), series.wall_time.tolist(), series.value.tolist()))


def test_truncated_record_then_its_last_byte(tmp_path):
    """TensorBoard's own test: record minus its last byte -> nothing, no error; last byte -> the
    event."""
    f = tmp_path / "events.out.tfevents.1.host"
    f.write_bytes(header())
    r = events.RunReader(tmp_path)
    assert r.refresh() == 0
    data = rec("loss", 1, 0.5)
    append(f, data[:-1])
    assert r.refresh() == 0 and r.scalars() == {} and r.warnings == []
    append(f, data[-1:])
    assert r.refresh() == 1
    assert points(r.scalars()["loss"]) == [(1, 1_700_000_001.0, 0.5)]
    assert r.refresh() == 0 and r.warnings == []


def test_every_cut_point_of_a_record_resumes_cleanly(tmp_path):
    f = tmp_path / "events.out.tfevents.1.host"
    data = b"".join(rec("t", s, float(s)) for s in range(3))
    r = events.RunReader(tmp_path)
    f.write_bytes(b"")
    assert r.refresh() == 0  # a zero-length file: a warning, once
    for i in range(len(data)):  # the writer flushes one byte at a time
        append(f, data[i : i + 1])
        r.refresh()
    assert r.scalars()["t"].step.tolist() == [0, 1, 2]
    assert r.warnings == [f"{f}: empty file (no events written yet)"]


def test_refresh_reads_only_new_bytes_and_grows_geometrically(tmp_path):
    f = tmp_path / "events.out.tfevents.1.host"
    f.write_bytes(header() + b"".join(rec("a", s, s * 0.5) for s in range(1000)))
    r = events.RunReader(tmp_path)
    assert r.refresh() == 1000
    first = r.scalars()["a"]
    assert r.nbytes() == 1000 * 24  # a first load is sized exactly (24 bytes a point)
    sizes = set()
    for k in range(50):
        append(f, rec("a", 1000 + k, 1.0))
        assert r.refresh() == 1
        sizes.add(r.nbytes())
    assert len(sizes) <= 3  # 50 appends, at most a couple of reallocations
    s = r.scalars()["a"]
    assert len(s) == 1050 and s.step[-1] == 1049
    assert len(first) == 1000 and first.step[-1] == 999  # an earlier snapshot never changes
    assert (
        not s.value.flags.writeable and s.step.dtype == np.int64 and s.wall_time.dtype == np.float64
    )


def test_new_file_in_existing_run_and_new_run_folder(tmp_path):
    run_a = tmp_path / "a"
    run_a.mkdir()
    (run_a / "events.out.tfevents.1.host").write_bytes(header() + rec("x", 1, 1.0))
    r = events.LogdirReader(tmp_path)
    assert r.refresh() == 1 and r.run_names() == ["a"]
    (run_a / "events.out.tfevents.2.host").write_bytes(header() + rec("x", 2, 2.0))  # a restart
    (tmp_path / "b" / "deep").mkdir(parents=True)
    (tmp_path / "b" / "deep" / "events.out.tfevents.3.host").write_bytes(rec("y", 5, 5.0))
    (tmp_path / "events.out.tfevents.4.host").write_bytes(rec("z", 6, 6.0))
    assert r.refresh() == 3
    assert r.run_names() == [".", "a", "b/deep"]
    assert r.scalars("a")["x"].step.tolist() == [1, 2]
    assert r.scalars("b/deep")["y"].value.tolist() == [5.0]
    assert r.scalars("nope") == {} and r.warnings == []
    assert events.discover(tmp_path) == [".", "a", "b/deep"]
    assert events.discover(tmp_path / "missing") == []


def test_two_files_merge_by_wall_time_then_step(tmp_path):
    """One file per rank, appended concurrently: the series interleaves them in time order."""
    f0 = tmp_path / "events.out.tfevents.1.host.rank0"
    f1 = tmp_path / "events.out.tfevents.1.host.rank1"
    # walls 10,12,..18
    f0.write_bytes(b"".join(rec("m", s, 0.0, wall=10.0 + 2 * s) for s in range(5)))
    f1.write_bytes(b"".join(rec("m", s, 1.0, wall=11.0 + 2 * s) for s in range(3)))  # 11,13,15
    r = events.RunReader(tmp_path)
    assert r.refresh() == 8
    s = r.scalars()["m"]
    assert s.wall_time.tolist() == [10, 11, 12, 13, 14, 15, 16, 18]
    append(
        f1, rec("m", 3, 1.0, wall=17.0) + rec("m", 7, 1.0, wall=18.0) + rec("m", 2, 1.0, wall=18.0)
    )
    assert r.refresh() == 3
    s2 = r.scalars()["m"]
    assert list(zip(s2.wall_time.tolist(), s2.step.tolist()))[-5:] == [
        (16, 3),
        (17, 3),
        (18, 2),
        (18, 4),
        (18, 7),
    ]
    assert s.wall_time.tolist() == [10, 11, 12, 13, 14, 15, 16, 18]  # the old snapshot is untouched
    assert np.all(np.diff(s2.wall_time) >= 0)


def test_tags_and_to_frame_on_a_run_reader(tmp_path):
    (tmp_path / "events.out.tfevents.1.h").write_bytes(
        rec("b", 1, 1.0) + rec("a", 1, 2.0) + rec("a", 2, 3.0)
    )
    r = events.RunReader(tmp_path)
    r.refresh()
    assert r.tags() == ["a", "b"]
    df = events.to_frame(r, run_name="mine")
    assert df.to_dict("list") == {
        "run": ["mine"] * 3,
        "tag": ["a", "a", "b"],
        "step": [1, 2, 1],
        "wall_time": [1_700_000_001.0, 1_700_000_002.0, 1_700_000_001.0],
        "value": [2.0, 3.0, 1.0],
    }
    assert len(events.to_frame(r, tags=["zzz"])) == 0
    assert list(events.to_frame({}).columns) == ["run", "tag", "step", "wall_time", "value"]


def test_protobuf_fallback_gives_the_same_points(tmp_path, monkeypatch):
    """If the column walker ever fails, the file is still read (through event_pb2), not stalled."""
    data = header() + b"".join(rec(t, s, s / 3) for s in range(200) for t in ("a", "bb"))
    (tmp_path / "events.out.tfevents.1.h").write_bytes(data)
    fast = events.RunReader(tmp_path)
    fast.refresh()

    def broken(*args, **kwargs):
        raise IndexError("simulated walker bug")

    monkeypatch.setattr(decode, "decode", broken)
    slow = events.RunReader(tmp_path)
    assert slow.refresh() == 400
    for tag in ("a", "bb"):
        assert points(slow.scalars()[tag]) == points(fast.scalars()[tag])


def loaded(loader: EventFileLoader) -> list[tuple[str, int, float]]:
    """(tag, step, value) of every point one ``load()`` yields."""
    return [
        (p.tags[i], s, v)
        for p in loader.load()
        for i, s, v in zip(p.tag_idx.tolist(), p.step.tolist(), p.value.tolist())
    ]


def test_file_loader_yields_only_new_points_and_resumes_inside_a_record(tmp_path):
    f = tmp_path / "events.out.tfevents.1.host"
    f.write_bytes(header() + rec("a", 1, 1.0))
    warned: list[str] = []
    loader = EventFileLoader(f, warned.append)
    assert loader.offset == 0 and loaded(loader) == [("a", 1, 1.0)]
    assert loaded(loader) == [] and loader.offset == os.path.getsize(f)
    data = rec("a", 2, 2.0)
    append(f, data[:-1])
    before = loader.offset
    assert loaded(loader) == [] and loader.offset == before  # "not yet": nothing consumed
    append(f, data[-1:] + rec("b", 3, 3.0))
    assert loaded(loader) == [("a", 2, 2.0), ("b", 3, 3.0)]
    assert loader.offset == os.path.getsize(f) and loader.state == "reading" and warned == []


def test_file_loader_reads_a_record_larger_than_its_chunk(tmp_path, monkeypatch):
    from lab.events import file_loader

    monkeypatch.setattr(file_loader, "CHUNK", 64)  # the header alone is 39 bytes, a record 50+
    f = tmp_path / "events.out.tfevents.1.host"
    f.write_bytes(
        header() + rec("x" * 100, 1, 1.0) + b"".join(rec("t", s, float(s)) for s in range(20))
    )
    loader = EventFileLoader(f)
    got = loaded(loader)
    assert got[0] == ("x" * 100, 1, 1.0) and [s for _, s, _ in got[1:]] == list(range(20))
    assert loader.offset == os.path.getsize(f)


def test_file_loader_deleted_is_final_other_errors_are_retried(tmp_path):
    f = tmp_path / "events.out.tfevents.1.host"
    f.write_bytes(rec("a", 1, 1.0))
    warned: list[str] = []
    loader = EventFileLoader(f, warned.append)
    assert len(loaded(loader)) == 1
    f.unlink()
    assert loaded(loader) == [] and loader.state == "deleted"
    # a new file of the same name: not this loader's
    f.write_bytes(rec("a", 1, 1.0) + rec("a", 2, 2.0))
    assert loaded(loader) == [] and len(warned) == 1 and "deleted" in warned[0]

    bad = tmp_path / "events.out.tfevents.2.host"
    os.symlink("/proc/self/mem", bad)  # reading offset 0 fails with EIO
    flaky = EventFileLoader(bad, warned.append)
    assert loaded(flaky) == [] and loaded(flaky) == [] and flaky.state == "reading"
    assert len(warned) == 2 and "will retry" in warned[1]  # one warning for the same error
    bad.unlink()
    bad.write_bytes(rec("b", 5, 5.0))
    assert loaded(flaky) == [("b", 5, 5.0)]


def test_file_loader_reads_on_after_a_bad_length(tmp_path):
    good = [rec("t", s, float(s)) for s in range(3)]
    broken = good[1][:2] + bytes([good[1][2] ^ 1]) + good[1][3:]
    f = tmp_path / "events.out.tfevents.1.host"
    f.write_bytes(good[0] + broken + good[2])
    warned: list[str] = []
    loader = EventFileLoader(f, warned.append)
    assert loaded(loader) == [("t", 0, 0.0), ("t", 2, 2.0)] and loader.state == "reading"
    append(f, rec("t", 9, 9.0))
    assert loaded(loader) == [("t", 9, 9.0)] and len(warned) == 1 and "length CRC" in warned[0]


def test_files_sharing_plugins_know_a_tag_from_its_first_metadata(tmp_path):
    """TF2 writers send a tag's plugin once: the run's other files still read its tensors as
    scalars."""

    def tensor_rec(step: int, plugin: str | None) -> bytes:
        ev = event_pb2.Event(wall_time=1.0 + step, step=step)
        v = ev.summary.value.add(
            tag="tf2", tensor=tensor_util.make_tensor_proto(np.float32(step / 2))
        )
        if plugin:
            v.metadata.plugin_data.plugin_name = plugin
        return frame(ev.SerializeToString())

    (tmp_path / "events.out.tfevents.1.a").write_bytes(tensor_rec(1, "scalars"))
    (tmp_path / "events.out.tfevents.2.b").write_bytes(tensor_rec(2, None))
    plugins: dict[str, str] = {}
    first = EventFileLoader(tmp_path / "events.out.tfevents.1.a", plugins=plugins)
    second = EventFileLoader(tmp_path / "events.out.tfevents.2.b", plugins=plugins)
    assert loaded(second) == []  # not known yet to be a scalar: skipped, never guessed
    assert loaded(first) == [("tf2", 1, 0.5)] and plugins == {"tf2": "scalars"}
    append(tmp_path / "events.out.tfevents.2.b", tensor_rec(3, None))
    assert loaded(second) == [("tf2", 3, 1.5)]
