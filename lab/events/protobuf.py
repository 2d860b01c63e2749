"""The protobuf side of event reading: TensorBoard's own message classes.

Owns every use of ``tensorboard.compat.proto`` by the reader: ``SlowPath``
decodes, record by record, what the fast column decoder (``lab.events.decode``)
hands over (whole Events it cannot follow, summary metadata, tensors);
``decode_with_protobuf`` reads a whole batch that way (the reader's fallback
if the fast decoder ever fails, and the reference it is tested against); and
a scalar ``TensorProto`` (TF2 ``tf.summary.scalar``: float_val, double_val,
half_val or tensor_content; float, double, half, bfloat16 or an integer type)
becomes one float. Imported lazily: files written by SummaryWriter never need
it.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2

from lab.events.points import Points, TensorValue, WholeEvent

# dtype -> (numpy dtype of tensor_content, repeated field holding the values)
_DTYPES = {
    types_pb2.DT_FLOAT: ("<f4", "float_val"),
    types_pb2.DT_DOUBLE: ("<f8", "double_val"),
    types_pb2.DT_HALF: ("<f2", "half_val"),
    types_pb2.DT_BFLOAT16: ("bf16", "half_val"),
    types_pb2.DT_INT32: ("<i4", "int_val"),
    types_pb2.DT_INT16: ("<i2", "int_val"),
    types_pb2.DT_INT8: ("i1", "int_val"),
    types_pb2.DT_UINT8: ("u1", "int_val"),
    types_pb2.DT_INT64: ("<i8", "int64_val"),
    types_pb2.DT_BOOL: ("?", "bool_val"),
}


def parse_event(payload: bytes) -> event_pb2.Event | None:
    try:
        return event_pb2.Event.FromString(payload)
    except (DecodeError, ValueError):
        return None


def plugin_name(metadata: bytes) -> str | None:
    """The plugin name in a serialized SummaryMetadata, None if unreadable."""
    try:
        return summary_pb2.SummaryMetadata.FromString(metadata).plugin_data.plugin_name
    except (DecodeError, ValueError):
        return None


def tensor_value(payload: bytes) -> float | None:
    try:
        return tensor_proto_value(tensor_pb2.TensorProto.FromString(payload))
    except (DecodeError, ValueError):
        return None


def _bf16(raw: np.ndarray) -> np.ndarray:
    # bfloat16 is the top half of a float32
    return (raw.astype(np.uint32) << 16).view(np.float32)


def tensor_proto_value(t: tensor_pb2.TensorProto) -> float | None:
    """The single value of a one-element tensor, None for anything else."""
    kind = _DTYPES.get(t.dtype)
    if kind is None:
        return None
    size = 1
    for d in t.tensor_shape.dim:
        size *= d.size
    if size != 1:
        return None
    np_dtype, field = kind
    if t.tensor_content:
        if np_dtype == "bf16":
            raw = np.frombuffer(t.tensor_content, dtype="<u2")
            arr = _bf16(raw)
        else:
            arr = np.frombuffer(t.tensor_content, dtype=np_dtype)
    else:
        vals = getattr(t, field)
        if not len(vals):
            return None
        if field == "half_val":  # the 16 bits of each value, held in an int32
            raw = np.array(vals[:1], dtype=np.uint16)
            arr = _bf16(raw) if np_dtype == "bf16" else raw.view(np.float16)
        else:
            arr = np.array(vals[:1])
    if arr.size < 1:
        return None
    return float(arr[0])


def decode_with_protobuf(
    buf: bytes, starts: np.ndarray, ends: np.ndarray, plugins: dict[str, str]
) -> Points:
    """Every record through ``event_pb2``: slow, but shares no code with the column walker."""
    slow = SlowPath(buf, plugins)
    slow.run(WholeEvent(i, s, e) for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())))
    lookup: dict[str, int] = {}
    idx = np.array([lookup.setdefault(t, len(lookup)) for t in slow.tag], dtype=np.int32)
    return Points(
        list(lookup),
        idx,
        np.array(slow.step, dtype=np.int64),
        np.array(slow.wall, dtype=np.float64),
        np.array(slow.value, dtype=np.float64),
        slow.undecodable,
    )


class SlowPath:
    """Per-record decoding of spans of ``buf``; points gather in parallel lists.

    ``plugins`` (tag -> plugin name) is updated in place: a tensor is a
    scalar only under a tag whose first metadata named the ``scalars`` plugin.
    """

    def __init__(self, buf: bytes, plugins: dict[str, str]) -> None:
        self.buf = buf
        self.plugins = plugins
        self.rec: list[int] = []
        self.tag: list[str] = []
        self.step: list[int] = []
        self.wall: list[float] = []
        self.value: list[float] = []
        self.undecodable = 0

    def run(self, items: Iterable[WholeEvent | TensorValue]) -> None:
        """Decode ``items`` in the order given (record order: first metadata wins)."""
        for item in items:
            if isinstance(item, WholeEvent):
                self._event(item)
            else:
                self._value(item)

    def _add(self, rec: int, tag: str, step: int, wall: float, value: float) -> None:
        self.rec.append(rec)
        self.tag.append(tag)
        self.step.append(step)
        self.wall.append(wall)
        self.value.append(value)

    def _value(self, v: TensorValue) -> None:
        if v.metadata is not None and v.tag not in self.plugins:
            name = plugin_name(bytes(self.buf[v.metadata[0] : v.metadata[1]]))
            if name is not None:
                self.plugins[v.tag] = name
        if v.tensor is None or self.plugins.get(v.tag) != "scalars":
            return  # an image, histogram, text... tensor: never decoded
        x = tensor_value(bytes(self.buf[v.tensor[0] : v.tensor[1]]))
        if x is not None:
            self._add(v.rec, v.tag, v.step, v.wall, x)

    def _event(self, w: WholeEvent) -> None:
        ev = parse_event(bytes(self.buf[w.start : w.end]))
        if ev is None:
            self.undecodable += 1
            return
        if not ev.HasField("summary"):
            return
        for val in ev.summary.value:
            if val.HasField("metadata") and val.tag not in self.plugins:
                self.plugins[val.tag] = val.metadata.plugin_data.plugin_name
            kind = val.WhichOneof("value")
            if kind == "simple_value":
                self._add(w.rec, val.tag, ev.step, ev.wall_time, val.simple_value)
            elif kind == "tensor" and self.plugins.get(val.tag) == "scalars":
                x = tensor_proto_value(val.tensor)
                if x is not None:
                    self._add(w.rec, val.tag, ev.step, ev.wall_time, x)
