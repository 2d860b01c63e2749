"""Min/max summaries of a column's values in power-of-two blocks, extended as points arrive.

Owns ``Blocks``: for every power-of-two block size from ``2**BASE_SHIFT`` points up, each
complete block's lowest and highest value and the first index holding each (NaN counts as
above every value for the minimum and below every value for the maximum, so a block of NaN
alone keeps its first index). A chart of a million points draws a thousand blocks of 1024:
``lab.views.downsample`` reads them here instead of scanning the series. The blocks are built
lazily, on the first draw that needs them, and then extended: a later draw pays for the points
appended since (64 at a time) and the blocks it reads, not for the whole series. A block, once
complete, never changes, as a column's points never change once handed out (``columns``); a
column that re-sorts its tail (an older point arrived) starts a new ``Blocks`` from a copy of
the blocks before the re-sorted part.

``of(values)`` finds the blocks of a ``Series``' value array: ``Column.series()`` registers
each long snapshot's array (``register``), by identity and for as long as it lives, so a page
that hands the array on (``np.asarray`` of a float64 array is the array itself) still reaches
its blocks; any other array has none, and is summarised from scratch.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

BASE_SHIFT = 6  # the smallest block summarised: 64 points
REGISTER_MIN = 1 << 14  # shorter series are scanned whole: cheaper than keeping their blocks

Level = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # min, argmin, max, argmax


class _Growing:
    """One level's four arrays with spare room; rows below ``count`` are never rewritten."""

    def __init__(self) -> None:
        self.count = 0
        self.mn = np.empty(0)
        self.amn = np.empty(0, dtype=np.int64)
        self.mx = np.empty(0)
        self.amx = np.empty(0, dtype=np.int64)

    def append(self, mn, amn, mx, amx) -> None:
        need = self.count + len(mn)
        if need > len(self.mn):
            cap = max(need, 2 * len(self.mn), 16)
            for name in ("mn", "amn", "mx", "amx"):
                old = getattr(self, name)
                new = np.empty(cap, dtype=old.dtype)
                new[: self.count] = old[: self.count]
                setattr(self, name, new)
        at = self.count
        self.mn[at:need], self.amn[at:need], self.mx[at:need], self.amx[at:need] = mn, amn, mx, amx
        self.count = need

    def rows(self, start: int, stop: int) -> Level:
        cut = slice(start, stop)
        return self.mn[cut], self.amn[cut], self.mx[cut], self.amx[cut]

    def copy(self, count: int) -> _Growing:
        out = _Growing()
        out.append(*self.rows(0, min(count, self.count)))
        return out


def summarise(values: np.ndarray, size: int, offset: int = 0) -> Level:
    """Each complete block of ``size`` points of ``values``: min, its first index, max, its first
    index (indices plus ``offset``)."""
    full = len(values) // size
    seg = np.asarray(values[: full * size], dtype=np.float64).reshape(full, size)
    nan = np.isnan(seg)
    lo = np.where(nan, np.inf, seg)
    hi = np.where(nan, -np.inf, seg)
    rows = np.arange(full)
    amn = lo.argmin(axis=1)  # argmin/argmax return the first occurrence
    amx = hi.argmax(axis=1)
    base = rows * size + offset
    return lo[rows, amn], base + amn, hi[rows, amx], base + amx


def _pairs(lv: Level) -> Level:
    """Blocks twice the size from consecutive pairs; on a tie the left (earlier) one wins."""
    mn, amn, mx, amx = lv
    left_lo, left_hi = mn[0::2] <= mn[1::2], mx[0::2] >= mx[1::2]
    return (
        np.where(left_lo, mn[0::2], mn[1::2]),
        np.where(left_lo, amn[0::2], amn[1::2]),
        np.where(left_hi, mx[0::2], mx[1::2]),
        np.where(left_hi, amx[0::2], amx[1::2]),
    )


class Blocks:
    """One column's blocks, level ``j`` holding blocks of ``2**(BASE_SHIFT + j)`` points."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._levels: list[_Growing] = [_Growing()]
        self.points_read = 0  # values scanned so far: what a test counts to see the cost

    def level(self, values: np.ndarray, shift: int) -> Level:
        """The complete blocks of ``2**shift`` points within ``values``, this column's first
        ``len(values)`` points (``shift >= BASE_SHIFT``)."""
        if shift < BASE_SHIFT:
            raise ValueError(f"blocks start at 2**{BASE_SHIFT} points, not 2**{shift}")
        with self._lock:
            self._extend(values)
            j = shift - BASE_SHIFT
            while len(self._levels) <= j:
                self._levels.append(_Growing())
                self._extend_above(len(self._levels) - 1)
            return self._levels[j].rows(0, len(values) >> shift)

    def _extend(self, values: np.ndarray) -> None:
        base = self._levels[0]
        have, want = base.count, len(values) >> BASE_SHIFT
        if want <= have:
            return
        size = 1 << BASE_SHIFT
        chunk = values[have * size : want * size]
        self.points_read += len(chunk)
        base.append(*summarise(chunk, size, offset=have * size))
        for j in range(1, len(self._levels)):
            self._extend_above(j)

    def _extend_above(self, j: int) -> None:
        below, lv = self._levels[j - 1], self._levels[j]
        want = below.count // 2
        if want > lv.count:
            lv.append(*_pairs(below.rows(2 * lv.count, 2 * want)))

    def truncated(self, points: int) -> Blocks:
        """New blocks holding only the blocks within the first ``points`` points."""
        out = Blocks()
        with self._lock:
            out._levels = [lv.copy(points >> (BASE_SHIFT + j)) for j, lv in enumerate(self._levels)]
        return out


_registry: dict[int, tuple[weakref.ref, Blocks]] = {}


def register(values: np.ndarray, blocks: Blocks) -> None:
    """``of(values)`` gives ``blocks`` while ``values`` lives."""
    key = id(values)

    def forget(ref: weakref.ref, key: int = key) -> None:
        entry = _registry.get(key)
        if entry is not None and entry[0] is ref:
            _registry.pop(key, None)

    _registry[key] = (weakref.ref(values, forget), blocks)


def of(values: object) -> Blocks | None:
    """The blocks of a registered snapshot array; None for any other object."""
    entry = _registry.get(id(values))
    if entry is None or entry[0]() is not values:
        return None
    return entry[1]
