"""Small files read as one batch (``lab.events.many``) give exactly what reading each alone gives.

A log folder mixes clean files with every kind of trouble: a damaged length, a bad payload
CRC, a record still being written, an empty file, TF2 tensors that need protobuf, points out
of time order, a file larger than the batch limit. The batch takes the clean ones and leaves
the rest to their own loaders; points, order and warnings must match the one-by-one read,
and a refresh after appends reads only the new bytes.
"""

from __future__ import annotations

import shutil

import numpy as np
from tensorboard.compat.proto import event_pb2
from tensorboard.util import tensor_util

from lab import events
from lab.events import many, tfrecord
from lab.events.tfrecord import frame
from tests.helpers.event_records import header, rec
from tests.helpers.event_snapshots import flip, snapshot


def tensor_rec(step: int, plugin: str | None) -> bytes:
    ev = event_pb2.Event(wall_time=1.0 + step, step=step)
    v = ev.summary.value.add(tag="tf2", tensor=tensor_util.make_tensor_proto(np.float32(step / 2)))
    if plugin:
        v.metadata.plugin_data.plugin_name = plugin
    return frame(ev.SerializeToString())


def write_folder(root) -> None:
    clean = [header()] + [rec(t, s, s * 0.25 + k) for s in range(150) for k, t in enumerate("abc")]
    for i in range(12):
        d = root / f"run{i:02d}" / "tb"
        d.mkdir(parents=True)
        (d / "events.out.tfevents.1.h").write_bytes(b"".join(clean[: 100 + 20 * i]))
    n = len(clean[1])
    body = b"".join(clean)
    trouble = {
        "damaged_length": flip(body, len(clean[0]) + 5 * n + 3),
        "bad_payload": flip(body, len(clean[0]) + 7 * n + 20),
        "unfinished": body + clean[5][:-3],
        "empty": b"",
        "tensors": tensor_rec(1, "scalars") + tensor_rec(2, None),
        "out_of_order": b"".join(rec("a", s, 1.0, wall=1e9 - s) for s in range(50)),
        "large": b"".join(rec("a", s, 1.0) for s in range(many.SMALL // 20)),
    }
    for name, data in trouble.items():
        (root / name).mkdir()
        (root / name / "events.out.tfevents.1.h").write_bytes(data)
    (root / "tensors" / "events.out.tfevents.2.h").write_bytes(tensor_rec(3, None))


def alone(reader: events.LogdirReader, monkeypatch) -> int:
    """A refresh that reads every file alone, the way files were always read."""
    with monkeypatch.context() as m:
        m.setattr(many, "SMALL", 0)
        return reader.refresh()


def test_batch_reads_the_same_as_one_by_one(tmp_path, monkeypatch):
    write_folder(tmp_path)
    batched_files = []
    real = tfrecord.scan_many
    monkeypatch.setattr(
        tfrecord, "scan_many", lambda bufs: batched_files.append(len(bufs)) or real(bufs)
    )
    fast = events.LogdirReader(tmp_path, cache=False)
    fast.refresh()
    # every small file tries it: 12 clean, 3 damaged or unfinished, 2 of tensors, 1 out of order
    assert batched_files == [18]
    slow = events.LogdirReader(tmp_path, cache=False)
    alone(slow, monkeypatch)
    assert snapshot(fast) == snapshot(slow)
    assert fast.warnings == slow.warnings and len(fast.warnings) == 3  # 2 damaged, 1 empty
    assert snapshot(fast)["tensors"]["tf2"][0] == [1, 2, 3]
    assert snapshot(fast)["out_of_order"]["a"][0] == list(range(49, -1, -1))

    L = rec("late", 999, 9.0)
    clean5 = rec("b", 1, 1.25)  # the unfinished file's last record, as write_folder wrote it
    for run, more in (
        ("run00", L),
        ("run05", L),
        ("damaged_length", L),
        ("unfinished", clean5[-3:]),
    ):
        f = next((tmp_path / run).rglob("events.out.tfevents.*"))
        with open(f, "ab") as fh:  # then a refresh reads on from where each file stopped
            fh.write(more)
    batched_files.clear()
    assert fast.refresh() == alone(slow, monkeypatch) == 4
    assert snapshot(fast) == snapshot(slow) and fast.warnings == slow.warnings
    assert batched_files == [4]  # only their new bytes, all of them clean now


def test_scan_many_never_reads_past_a_buffer():
    good = rec("t", 1, 1.0)
    huge = (1 << 63).to_bytes(8, "little") + good[8:]  # a length that reads negative
    ms = tfrecord.scan_many([good, huge, good[:-1], b"\0" * 11, good + good])
    assert ms.clean.tolist() == [True, False, False, False, True]
    assert ms.bounds.tolist() == [0, 1, 1, 1, 1, 3]
    span = [ms.buf[s:e] for s, e in zip(ms.starts.tolist(), ms.ends.tolist())]
    assert span == [good[12:-4]] * 3


def test_many_folders_refreshed_as_one_batch_read_what_each_alone_reads(tmp_path, monkeypatch):
    """Compare reads a thousand run folders with a reader each: ``refresh_all`` frames all their
    small files together (one ``scan_many``), and each reader holds what its own refresh gives,
    the troubled folders' warnings too; a folder deleted since is dropped as alone."""
    write_folder(tmp_path)
    folders = sorted(tmp_path.iterdir())
    batched_files = []
    real = tfrecord.scan_many
    monkeypatch.setattr(
        tfrecord, "scan_many", lambda bufs: batched_files.append(len(bufs)) or real(bufs)
    )
    together = [events.LogdirReader(f, cache=False) for f in folders]
    assert events.refresh_all(together + together[:2]) > 0  # a reader named twice reads once
    assert batched_files == [18]  # every small file of every folder in one batch
    for f, r in zip(folders, together):
        one = events.LogdirReader(f, cache=False)
        one.refresh()
        assert snapshot(r) == snapshot(one) and r.warnings == one.warnings, f.name
    with open(next((tmp_path / "run03").rglob("events.out.tfevents.*")), "ab") as fh:
        fh.write(rec("late", 999, 9.0))
    shutil.rmtree(tmp_path / "run07" / "tb")
    batched_files.clear()
    # run03's new bytes, and the unfinished record tried again
    assert events.refresh_all(together) == 1 and batched_files == [2]
    assert snapshot(together[folders.index(tmp_path / "run03")])["tb"]["late"][0] == [999]
    gone = together[folders.index(tmp_path / "run07")]
    assert gone.run_names() == [] and any("deleted" in w for w in gone.warnings)


def test_a_batch_that_fails_reads_each_folder_alone(tmp_path, monkeypatch):
    write_folder(tmp_path)
    folders = sorted(tmp_path.iterdir())[:3]
    monkeypatch.setattr(
        events.reader, "refresh_runs", lambda runs: (_ for _ in ()).throw(RuntimeError("bug"))
    )
    readers = [events.LogdirReader(f, cache=False) for f in folders]
    assert events.refresh_all(readers) == 0  # each alone fails the same way, and says so
    assert all("unexpected error (bug)" in r.warnings[-1] for r in readers)
