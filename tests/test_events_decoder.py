"""The column decoder against protobuf, on thousands of random but valid events.

``decode.decode`` (numpy field walker) must give exactly the points that
``protobuf.decode_with_protobuf`` (TensorBoard's event_pb2 per record) gives,
in the same order, for any mix of shapes a writer could produce.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tensorboard.compat.proto import event_pb2, graph_pb2
from tensorboard.util import tensor_util

from lab.events import decode, protobuf, tfrecord

REPO = Path(__file__).resolve().parent.parent


def random_event(rng: np.random.Generator) -> event_pb2.Event:
    ev = event_pb2.Event()
    if rng.random() < 0.9:
        ev.wall_time = float(rng.uniform(0, 2e9))
    r = rng.random()
    ev.step = (
        0
        if r < 0.1
        else int(rng.integers(-5, 0))
        if r < 0.15
        else int(rng.integers(1, 2**40 if r < 0.3 else 20_000))
    )
    kind = rng.random()
    if kind < 0.05:
        ev.file_version = "brain.Event:2"
        return ev
    if kind < 0.08:
        ev.graph_def = graph_pb2.GraphDef(node=[]).SerializeToString() + b"\x0a\x03abc"
        return ev
    for _ in range(int(rng.choice([0, 1, 1, 1, 1, 2, 3]))):
        tag = "t" + "x" * int(rng.choice([0, 3, 10, 126, 127, 200])) + str(int(rng.integers(0, 4)))
        v = ev.summary.value.add(tag=tag)
        what = rng.random()
        if what < 0.6:
            v.simple_value = float(rng.normal())
        elif what < 0.8:
            v.tensor.CopyFrom(tensor_util.make_tensor_proto(np.float32(rng.normal())))
        elif what < 0.9:
            v.image.encoded_image_string = b"\x89PNG" + bytes(int(rng.integers(0, 300)))
        else:
            v.histo.min = 1.0
        if rng.random() < 0.3:
            v.metadata.plugin_data.plugin_name = str(rng.choice(["scalars", "images", "text"]))
        if rng.random() < 0.1:
            v.metadata.display_name = "shown"
    return ev


def test_column_decoder_equals_protobuf_on_random_events():
    rng = np.random.default_rng(7)
    for _ in range(5):
        evs = [random_event(rng) for _ in range(1500)]
        buf = b"".join(tfrecord.frame(e.SerializeToString()) for e in evs)
        sc = tfrecord.scan(buf)
        assert len(sc.starts) == 1500 and sc.skipped == []
        fast = decode.decode(buf, sc.starts, sc.ends, {})
        slow = protobuf.decode_with_protobuf(buf, sc.starts, sc.ends, {})
        assert [fast.tags[i] for i in fast.tag_idx] == [slow.tags[i] for i in slow.tag_idx]
        assert np.array_equal(fast.step, slow.step)
        assert np.array_equal(fast.wall_time, slow.wall_time)
        assert np.array_equal(fast.value, slow.value, equal_nan=True)
        assert len(fast.step) > 500


def test_random_corruption_never_raises_and_keeps_the_prefix():
    rng = np.random.default_rng(11)
    evs = [random_event(rng) for _ in range(300)]
    recs = [tfrecord.frame(e.SerializeToString()) for e in evs]
    buf = b"".join(recs)
    for _ in range(200):
        b = bytearray(buf)
        at = int(rng.integers(0, len(b)))
        b[at] ^= int(rng.integers(1, 256))
        sc = tfrecord.scan(bytes(b))
        pts = decode.decode(bytes(b), sc.starts, sc.ends, {})
        # every record that ends before the flipped byte is still there
        intact = sum(1 for end in np.cumsum([len(r) for r in recs]) if end <= at)
        assert len(sc.starts) >= intact
        assert len(pts.step) == len(pts.value)


LAZY = """
import sys
from lab.events import RunReader
r = RunReader(sys.argv[1])
proto = "tensorboard.compat.proto.event_pb2"
print(r.refresh(), "lab.events.protobuf" in sys.modules, proto in sys.modules)
"""


def read_in_fresh_process(run_dir) -> list[str]:
    return subprocess.run(
        [sys.executable, "-c", LAZY, str(run_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()


@pytest.mark.proc
def test_protobuf_is_loaded_only_for_records_that_need_it(tmp_path):
    """SummaryWriter's header and simple values never import TensorBoard's protos; a tensor does."""
    plain, tensor = tmp_path / "plain", tmp_path / "tensor"
    plain.mkdir()
    tensor.mkdir()
    recs = [event_pb2.Event(wall_time=1.0, file_version="brain.Event:2")]
    recs += [event_pb2.Event(wall_time=2.0 + s, step=s) for s in range(3)]
    for s, ev in enumerate(recs[1:]):
        ev.summary.value.add(tag="loss", simple_value=float(s))
    (plain / "events.out.tfevents.1.h").write_bytes(
        b"".join(tfrecord.frame(e.SerializeToString()) for e in recs)
    )
    ev = event_pb2.Event(wall_time=3.0, step=1)
    v = ev.summary.value.add(tag="tf2", tensor=tensor_util.make_tensor_proto(np.float32(0.5)))
    v.metadata.plugin_data.plugin_name = "scalars"
    (tensor / "events.out.tfevents.1.h").write_bytes(tfrecord.frame(ev.SerializeToString()))
    assert read_in_fresh_process(plain) == ["3", "False", "False"]
    assert read_in_fresh_process(tensor) == ["1", "True", "True"]
