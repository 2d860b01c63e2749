"""The protobuf side of event reading: TensorBoard's own message classes.

Owns every use of ``tensorboard.compat.proto`` by the reader: parsing a whole
Event when the fast column decoder cannot, reading a summary's plugin name,
and turning a scalar ``TensorProto`` (TF2 ``tf.summary.scalar``: float_val,
double_val, half_val or tensor_content; float, double, half, bfloat16 or an
integer type) into one float. Imported lazily: files written by
SummaryWriter never need it.
"""
from __future__ import annotations

import numpy as np
from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2

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
