"""lab.events against TensorBoard's own EventAccumulator, on files from every writer here.

Each test writes real event files (torch SummaryWriter, tensorboardX,
TF2-style tensor summaries built from tensorboard's protobufs, and a file
mixing images, histograms, text, a graph and hparams) and checks that our
steps, wall times and values equal EventAccumulator's, point for point.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
from tensorboard.util import tensor_util

from lab import events
from lab.events.tfrecord import frame


def ea_points(run_dir) -> dict[str, list[tuple[int, float, float]]]:
    """Every scalar EventAccumulator sees: simple values and ``scalars``-plugin tensors."""
    ea = EventAccumulator(
        str(run_dir), size_guidance={"scalars": 0, "tensors": 0}, purge_orphaned_data=False
    )
    ea.Reload()
    out = {t: [(e.step, e.wall_time, e.value) for e in ea.Scalars(t)] for t in ea.Tags()["scalars"]}
    for t in ea.Tags()["tensors"]:
        if ea.SummaryMetadata(t).plugin_data.plugin_name != "scalars":
            continue
        pts = []
        for e in ea.Tensors(t):
            arr = tensor_util.make_ndarray(e.tensor_proto)
            if arr.size == 1:
                pts.append((e.step, e.wall_time, float(arr.reshape(-1)[0])))
        out[t] = pts
    return out


def our_points(run_dir) -> dict[str, list[tuple[int, float, float]]]:
    r = events.RunReader(run_dir)
    r.refresh()
    assert r.warnings == []
    return {
        t: list(zip(s.step.tolist(), s.wall_time.tolist(), s.value.tolist()))
        for t, s in r.scalars().items()
    }


def assert_same(ours, theirs):
    assert sorted(ours) == sorted(theirs)
    for tag in theirs:
        a, b = ours[tag], theirs[tag]
        assert len(a) == len(b), tag
        for (s1, w1, v1), (s2, w2, v2) in zip(a, b):
            assert s1 == s2 and w1 == w2, tag
            assert v1 == v2 or (math.isnan(v1) and math.isnan(v2)), (tag, v1, v2)


def test_torch_summarywriter_scalars_equal_eventaccumulator(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path))
    for step in range(300):  # crosses the one- and two-byte step varints
        w.add_scalar("train/loss", 1.0 / (step + 1), step)
        w.add_scalar("perf/samples_per_sec", 1000.0 + step, step)
        if step % 50 == 0:
            w.add_scalar("val/acc", step / 300, step)
            w.add_scalar("new_style/loss", 2.0 * step, step, new_style=True)
            w.add_scalar(
                "new_style/double", 1 / 3 + step, step, new_style=True, double_precision=True
            )
    w.add_scalar("edge/nan", float("nan"), 1)
    w.add_scalar("edge/inf", float("inf"), 2)
    w.add_scalar("edge/negative_step", 5.0, -3)
    w.add_scalar("edge/big_step", 5.0, 2**40)
    w.close()
    ours, theirs = our_points(tmp_path), ea_points(tmp_path)
    assert_same(ours, theirs)
    assert len(ours["train/loss"]) == 300 and ours["new_style/double"][1][2] == 1 / 3 + 50


def test_tensorboardx_scalars_equal_eventaccumulator(tmp_path):
    from tensorboardX import SummaryWriter

    w = SummaryWriter(str(tmp_path))
    for step in range(200):
        w.add_scalar("loss", 3.0 - step * 0.01, step)
        w.add_scalar("a/very/long/tag/name/" + "x" * 130, float(step), step)  # two-byte tag length
        w.add_scalar("described", step * 2.0, step, display_name="Shown", summary_description="why")
    w.add_scalar("walltime_given", 1.5, 7, walltime=1_700_000_000.25)
    w.close()
    ours, theirs = our_points(tmp_path), ea_points(tmp_path)
    assert_same(ours, theirs)
    assert ours["walltime_given"] == [(7, 1_700_000_000.25, 1.5)]


def _tensor_event(tag, step, wall, tensor, plugin):
    value = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
    if plugin is not None:
        value.metadata.plugin_data.plugin_name = plugin
    return event_pb2.Event(wall_time=wall, step=step, summary=summary_pb2.Summary(value=[value]))


def _scalar_tensor(kind: str, x: float) -> tensor_pb2.TensorProto:
    shape = tensor_shape_pb2.TensorShapeProto()
    if kind == "float_val":
        return tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=shape, float_val=[x])
    if kind == "double_val":
        return tensor_pb2.TensorProto(dtype=types_pb2.DT_DOUBLE, tensor_shape=shape, double_val=[x])
    if kind == "half_val":
        bits = int(np.array([x], dtype=np.float16).view(np.uint16)[0])
        return tensor_pb2.TensorProto(dtype=types_pb2.DT_HALF, tensor_shape=shape, half_val=[bits])
    dtype, np_dtype = {
        "content_float": (types_pb2.DT_FLOAT, np.float32),
        "content_double": (types_pb2.DT_DOUBLE, np.float64),
        "content_half": (types_pb2.DT_HALF, np.float16),
    }[kind]
    return tensor_pb2.TensorProto(
        dtype=dtype, tensor_shape=shape, tensor_content=np.array([x], dtype=np_dtype).tobytes()
    )


def write_tf2_file(path, n_steps=40):
    """TF2 ``tf.summary.scalar``-style tensors; some tags carry metadata only on their first
    value."""
    recs = [
        frame(
            event_pb2.Event(
                wall_time=1_700_000_000.0, file_version="brain.Event:2"
            ).SerializeToString()
        )
    ]
    kinds = [
        "float_val",
        "double_val",
        "half_val",
        "content_float",
        "content_double",
        "content_half",
    ]
    for step in range(n_steps):
        wall = 1_700_000_000.0 + step * 0.37
        for i, kind in enumerate(kinds):
            first_only = i % 2 == 1
            plugin = "scalars" if (step == 0 or not first_only) else None
            ev = _tensor_event(
                f"tf2/{kind}", step, wall, _scalar_tensor(kind, 0.1 * step + i), plugin
            )
            recs.append(frame(ev.SerializeToString()))
        # Tensors that are not scalars: skipped, never decoded
        img = tensor_pb2.TensorProto(
            dtype=types_pb2.DT_STRING, string_val=[b"2", b"2", b"\x89PNG" + bytes(300)]
        )
        recs.append(
            frame(
                _tensor_event(
                    "tf2/image", step, wall, img, "images" if step == 0 else None
                ).SerializeToString()
            )
        )
        hist = tensor_util.make_tensor_proto(np.ones((5, 3), dtype=np.float64))
        recs.append(
            frame(_tensor_event("tf2/hist", step, wall, hist, "histograms").SerializeToString())
        )
        vec = tensor_util.make_tensor_proto(np.array([1.0, 2.0], dtype=np.float32))
        recs.append(
            frame(_tensor_event("tf2/not_a_scalar", step, wall, vec, "scalars").SerializeToString())
        )
    path.write_bytes(b"".join(recs))


def test_tf2_tensor_scalars_equal_eventaccumulator(tmp_path):
    write_tf2_file(tmp_path / "events.out.tfevents.1700000000.host.1.v2")
    ours, theirs = our_points(tmp_path), ea_points(tmp_path)
    theirs.pop("tf2/not_a_scalar")  # EA keeps the tag with no one-value points
    assert_same(ours, theirs)
    assert len(ours) == 6 and all(len(v) == 40 for v in ours.values())
    assert ours["tf2/half_val"][3][2] == float(np.float16(0.3 + 2))


def test_several_values_in_one_event_and_odd_layouts(tmp_path):
    """Shapes the column walker hands to protobuf: many values per event, step 0, field order."""
    recs = []
    ev = event_pb2.Event(wall_time=1.5, step=0)
    for k in range(3):
        ev.summary.value.add(tag=f"multi/{k}", simple_value=float(k))
    recs.append(frame(ev.SerializeToString()))
    # Fields written in an unusual order (step before wall_time): still valid protobuf
    odd = (
        event_pb2.Event(step=9).SerializeToString()
        + event_pb2.Event(wall_time=2.5).SerializeToString()
    )
    odd += event_pb2.Event(
        summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="odd", simple_value=4.0)])
    ).SerializeToString()
    recs.append(frame(odd))
    (tmp_path / "events.out.tfevents.1.odd").write_bytes(b"".join(recs))
    ours, theirs = our_points(tmp_path), ea_points(tmp_path)
    assert_same(ours, theirs)
    assert ours["odd"] == [(9, 2.5, 4.0)] and ours["multi/2"] == [(0, 1.5, 2.0)]


def test_mixed_file_images_histograms_text_graph_hparams(tmp_path):
    import torch
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path))
    w.add_graph(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()), torch.zeros(2, 4))
    for step in range(20):
        w.add_scalar("train/loss", 1.0 / (step + 1), step)
        w.add_image("img", np.random.default_rng(step).random((3, 8, 8)), step)
        w.add_histogram("weights", np.random.default_rng(step).normal(size=100), step)
        w.add_text("note", f"step {step}", step)
        w.add_scalar("train/acc", step / 20, step)
    w.add_hparams({"lr": 0.1, "bs": 32}, {"hparam/final_loss": 0.05})  # writes a sub-run
    w.close()
    names = events.discover(tmp_path)
    assert names[0] == "." and len(names) == 2  # the hparams call made a timestamped sub-folder
    for name in names:
        run_dir = tmp_path / name
        assert_same(our_points(run_dir), ea_points(run_dir))
    assert sorted(our_points(tmp_path)) == ["train/acc", "train/loss"]


def test_tf2_file_read_with_eventaccumulator_via_logdir_reader(tmp_path):
    """The same points come out of LogdirReader (discovery + runs) and to_frame."""
    run = tmp_path / "exp" / "tf2"
    run.mkdir(parents=True)
    write_tf2_file(run / "events.out.tfevents.1700000000.host.1.v2", n_steps=5)
    r = events.LogdirReader(tmp_path)
    assert r.refresh() == 30
    assert r.run_names() == ["exp/tf2"]
    df = events.to_frame(r, tags=r"content")
    assert list(df.columns) == ["run", "tag", "step", "wall_time", "value"]
    assert len(df) == 15 and set(df["run"]) == {"exp/tf2"}
    theirs = ea_points(run)
    for tag, grp in df.groupby("tag"):
        assert list(zip(grp["step"], grp["wall_time"], grp["value"])) == theirs[tag]


@pytest.mark.parametrize("n", [1, 127, 128, 16384])
def test_step_varint_boundaries(tmp_path, n):
    recs = [
        frame(
            event_pb2.Event(
                wall_time=float(s),
                step=s,
                summary=summary_pb2.Summary(
                    value=[summary_pb2.Summary.Value(tag="t", simple_value=float(s))]
                ),
            ).SerializeToString()
        )
        for s in range(max(0, n - 3), n + 3)
    ]
    (tmp_path / "events.out.tfevents.1.v").write_bytes(b"".join(recs))
    assert_same(our_points(tmp_path), ea_points(tmp_path))
    assert os.path.exists(tmp_path / "events.out.tfevents.1.v")
