"""lab.events on files that cannot be trusted: bad CRCs, garbage, empty, unreadable, deleted.

Nothing may raise; what was read stays; each problem becomes a line in
``.warnings``. The unreadable file is real: a symlink to ``/proc/self/mem``,
whose first page is never mapped, so reading it fails with EIO even as root.
"""

from __future__ import annotations

import os
import shutil

import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2

from lab import events
from lab.events import tfrecord
from lab.events.tfrecord import frame


def rec(tag: str, step: int, value: float) -> bytes:
    ev = event_pb2.Event(
        wall_time=1_700_000_000.0 + step,
        step=step,
        summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]),
    )
    return frame(ev.SerializeToString())


def flip(data: bytes, i: int) -> bytes:
    return data[:i] + bytes([data[i] ^ 0x40]) + data[i + 1 :]


def steps(reader, tag="t"):
    s = reader.scalars().get(tag)
    return [] if s is None else s.step.tolist()


def test_masked_crc_matches_tensorflow():
    # Known value from TensorFlow's crc32c_test / record writer: crc32c("123456789") = 0xE3069283
    assert tfrecord.crc32c(b"123456789") == 0xE3069283
    c = 0xE3069283
    assert tfrecord.mask(c) == ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    import io

    from tensorboard.summary.writer.record_writer import RecordWriter

    buf = io.BytesIO()
    RecordWriter(buf).write(b"payload")
    assert buf.getvalue() == frame(b"payload")


def test_flipped_byte_in_a_payload_skips_that_record_only(tmp_path):
    good = [rec("t", s, float(s)) for s in range(5)]
    bad = flip(good[2], 20)  # inside the payload
    (tmp_path / "events.out.tfevents.1.h").write_bytes(b"".join(good[:2] + [bad] + good[3:]))
    r = events.RunReader(tmp_path)
    assert r.refresh() == 4
    assert steps(r) == [0, 1, 3, 4]
    assert len(r.warnings) == 1 and "bad CRC" in r.warnings[0]


def test_flipped_byte_in_a_length_skips_to_the_next_record(tmp_path):
    good = [rec("t", s, float(s)) for s in range(5)]
    f = tmp_path / "events.out.tfevents.1.h"
    f.write_bytes(b"".join(good[:2] + [flip(good[2], 1)] + good[3:]))
    (tmp_path / "events.out.tfevents.2.h").write_bytes(rec("other", 1, 1.0))
    r = events.RunReader(tmp_path)
    r.refresh()
    assert steps(r) == [0, 1, 3, 4] and steps(r, "other") == [1]
    at = len(good[0]) + len(good[1])
    assert r.warnings == [
        f"{f}: length CRC mismatch at byte {at}; "
        f"skipped {len(good[2])} bytes to the next record that verifies"
    ]
    with open(f, "ab") as fh:  # the file goes on being read
        fh.write(rec("t", 9, 9.0))
    assert r.refresh() == 1 and steps(r) == [0, 1, 3, 4, 9] and len(r.warnings) == 1


def test_damaged_length_among_1000_tensorboard_records_costs_one_point(tmp_path):
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    w = EventFileWriter(str(tmp_path / "w"))
    for s in range(1000):
        w.add_event(event_pb2.Event(wall_time=ev_wall(s), step=s, summary=summary_value("t", s)))
    w.close()
    (path,) = (tmp_path / "w").iterdir()
    data = path.read_bytes()
    heads = record_heads(data)
    assert len(heads) == 1001  # the writer's file_version event, then 1000 scalars
    victim = heads[500]
    path.write_bytes(flip(data, victim + 3))  # the middle record's length field
    r = events.RunReader(tmp_path / "w")
    r.refresh()
    assert steps(r) == [s for s in range(1000) if s != 499]
    skipped = heads[501] - victim
    assert len(r.warnings) == 1 and f"at byte {victim}; skipped {skipped} bytes" in r.warnings[0]


def test_scan_never_loops_on_bytes_that_never_verify():
    for seed in range(20):
        junk = os.urandom(3000 + seed)
        sc = tfrecord.scan(junk + rec("t", 1, 1.0))
        assert len(sc.starts) == 1 and sc.consumed == len(junk) + len(rec("t", 1, 1.0))
        assert sc.skipped and sum(n for _, n in sc.skipped) == len(junk)


def ev_wall(step: int) -> float:
    return 1_700_000_000.0 + step


def summary_value(tag: str, step: int) -> summary_pb2.Summary:
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=step)])


def record_heads(data: bytes) -> list[int]:
    heads, pos = [], 0
    while pos < len(data):
        heads.append(pos)
        pos += int.from_bytes(data[pos : pos + 8], "little") + 16
    return heads


def test_length_that_claims_more_than_the_file_is_corrupt_not_truncated(tmp_path):
    good = rec("t", 1, 1.0)
    huge = (2**40).to_bytes(8, "little") + good[8:]  # length CRC no longer matches
    (tmp_path / "events.out.tfevents.1.h").write_bytes(good + huge)
    r = events.RunReader(tmp_path)
    r.refresh()
    assert steps(r) == [1] and "length CRC" in r.warnings[0]


@pytest.mark.proc
def test_garbage_bytes_and_garbage_after_good_records(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "events.out.tfevents.1.h").write_bytes(os.urandom(5000))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "events.out.tfevents.1.h").write_bytes(rec("t", 1, 1.0) + b"\x00garbage" * 50)
    r = events.LogdirReader(tmp_path)
    r.refresh()
    assert r.scalars("a") == {} and r.scalars("b")["t"].step.tolist() == [1]
    assert len(r.warnings) == 2 and all("length CRC" in w for w in r.warnings)


def test_valid_framing_around_a_payload_that_is_not_an_event(tmp_path):
    (tmp_path / "events.out.tfevents.1.h").write_bytes(frame(b"\xff\xff\xff") + rec("t", 2, 2.0))
    r = events.RunReader(tmp_path)
    assert r.refresh() == 1 and steps(r) == [2]
    assert "not valid events" in r.warnings[0]


def test_zero_length_file(tmp_path):
    (tmp_path / "events.out.tfevents.1.h").write_bytes(b"")
    r = events.RunReader(tmp_path)
    assert r.refresh() == 0 and r.refresh() == 0
    assert r.warnings == [
        f"{tmp_path / 'events.out.tfevents.1.h'}: empty file (no events written yet)"
    ]


def test_unreadable_file_is_retried(tmp_path):
    bad = tmp_path / "events.out.tfevents.2.h"
    os.symlink("/proc/self/mem", bad)  # reading offset 0 fails with EIO
    (tmp_path / "events.out.tfevents.1.h").write_bytes(rec("t", 1, 1.0))
    r = events.RunReader(tmp_path)
    assert r.refresh() == 1
    assert r.refresh() == 0
    assert len(r.warnings) == 1 and "cannot read" in r.warnings[0] and "retry" in r.warnings[0]
    bad.unlink()
    bad.write_bytes(rec("t", 2, 2.0))  # readable now: picked up where it was
    assert r.refresh() == 1 and steps(r) == [1, 2]


def test_file_deleted_between_refreshes_keeps_its_points(tmp_path):
    f = tmp_path / "events.out.tfevents.1.h"
    f.write_bytes(rec("t", 1, 1.0))
    (tmp_path / "events.out.tfevents.2.h").write_bytes(rec("t", 2, 2.0))
    r = events.RunReader(tmp_path)
    r.refresh()
    f.unlink()
    assert r.refresh() == 0 and r.refresh() == 0
    assert steps(r) == [1, 2]
    assert len(r.warnings) == 1 and "deleted" in r.warnings[0]


def test_run_folder_deleted_is_dropped_with_one_warning(tmp_path):
    for name in ("keep", "gone"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "events.out.tfevents.1.h").write_bytes(rec("t", 1, 1.0))
    r = events.LogdirReader(tmp_path)
    r.refresh()
    shutil.rmtree(tmp_path / "gone")
    r.refresh()
    r.refresh()
    assert r.run_names() == ["keep"]
    assert r.warnings == ["gone: run folder deleted; dropped"]
    single = events.RunReader(tmp_path / "keep")
    single.refresh()
    shutil.rmtree(tmp_path / "keep")
    assert single.refresh() == 0 and single.refresh() == 0
    assert steps(single) == [1] and len(single.warnings) == 1 and single.gone


def test_missing_root_is_not_an_error(tmp_path):
    r = events.LogdirReader(tmp_path / "later")
    assert r.refresh() == 0 and r.run_names() == []
    (tmp_path / "later").mkdir()
    (tmp_path / "later" / "events.out.tfevents.1.h").write_bytes(rec("t", 3, 3.0))
    assert r.refresh() == 1 and r.run_names() == ["."]
    assert len(r.warnings) == 1 and "no such folder" in r.warnings[0]


def test_run_reader_on_a_folder_that_appears_later(tmp_path):
    r = events.RunReader(tmp_path / "later")
    assert r.refresh() == 0 and r.refresh() == 0 and not r.gone
    assert r.warnings == [f"{tmp_path / 'later'}: no such folder yet"]
    (tmp_path / "later").mkdir()
    (tmp_path / "later" / "events.out.tfevents.1.h").write_bytes(rec("t", 4, 4.0))
    assert r.refresh() == 1 and steps(r) == [4]


def test_file_rewritten_shorter_is_reported_not_misread(tmp_path):
    f = tmp_path / "events.out.tfevents.1.h"
    f.write_bytes(rec("t", 1, 1.0) + rec("t", 2, 2.0))
    r = events.RunReader(tmp_path)
    r.refresh()
    f.write_bytes(rec("t", 9, 9.0))
    assert r.refresh() == 0 and steps(r) == [1, 2]
    assert "shrank" in r.warnings[-1]
