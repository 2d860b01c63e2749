"""The values that pass between the column decoder and the protobuf path.

Owns ``Points`` (scalar points of a batch of records, in record order) and the
two work items the fast decoder (``lab.events.decode``) hands to the protobuf
path (``lab.events.protobuf``): ``WholeEvent`` and ``TensorValue``. Both
modules import these from here, so neither imports the other's types and
``decode`` alone reaches ``protobuf`` (lazily, for files that need it).
Tested through tests/test_events_decoder.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


@dataclass
class Points:
    """Scalar points in record order; ``tag_idx`` indexes ``tags``."""

    tags: list[str]
    tag_idx: np.ndarray
    step: np.ndarray
    wall_time: np.ndarray
    value: np.ndarray
    undecodable: int = 0


class WholeEvent(NamedTuple):
    """A record the walker cannot follow: protobuf parses all of it."""

    rec: int
    start: int
    end: int


class TensorValue(NamedTuple):
    """A summary value with metadata and/or a tensor: spans of ``buf`` for protobuf."""

    rec: int
    tag: str
    metadata: tuple[int, int] | None
    tensor: tuple[int, int] | None
    wall: float
    step: int
