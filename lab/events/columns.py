"""Per-tag scalar columns: growable numpy arrays and the read-only snapshots handed out.

Owns ``Series`` (what callers get: ``step`` int64, ``wall_time`` float64,
``value`` float64, ordered by wall time then step) and ``Column`` (what a
reader keeps: arrays with spare capacity, grown geometrically so a live
refresh appends in amortised O(new points)). Buffers are never rewritten
where a handed-out snapshot can see them, so a Series never changes. A column keeps the
min/max blocks of its values (``lab.events.blocks``) and registers each long snapshot's value
array with them, so a chart drawn from it reads blocks instead of every point.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lab.events.blocks import REGISTER_MIN, Blocks, register


@dataclass(frozen=True)
class Series:
    """One tag of one run: equal-length read-only arrays, by wall time then step."""

    step: np.ndarray
    wall_time: np.ndarray
    value: np.ndarray

    def __len__(self) -> int:
        return len(self.step)


class Column:
    """Growable columns for one tag; appends are amortised O(batch)."""

    def __init__(self) -> None:
        self.n = 0
        self.step = np.empty(0, dtype=np.int64)
        self.wall = np.empty(0, dtype=np.float64)
        self.value = np.empty(0, dtype=np.float64)
        self.blocks: Blocks | None = None  # made when a snapshot is long enough to need them

    def extend(
        self, step: np.ndarray, wall: np.ndarray, value: np.ndarray, presorted: bool = False
    ) -> None:
        """Add a batch; ``presorted``: it is known to be in (wall time, step) order already."""
        if len(step) == 0:
            return
        if len(step) > 1 and not presorted and not _is_sorted(wall, step):
            o = np.lexsort((step, wall))
            step, wall, value = step[o], wall[o], value[o]
        n = self.n
        if n and (wall[0], step[0]) < (self.wall[n - 1], self.step[n - 1]):
            self._merge(step, wall, value)
            return
        need = n + len(step)
        if need > len(self.step):
            # The first batch gets exactly its size (a full load costs 24 B a
            # point); later growth is geometric so live appends stay cheap.
            self._realloc(need if n == 0 else max(need, int(len(self.step) * 1.5)))
        self.step[n:need] = step
        self.wall[n:need] = wall
        self.value[n:need] = value
        self.n = need

    def adopt(self, step: np.ndarray, wall: np.ndarray, value: np.ndarray) -> None:
        """Start an empty column as these sorted, read-only arrays, without a copy.

        For a cache entry's columns (views of the entry's bytes): any later append reallocates,
        as the arrays are full, so they are never written to.
        """
        if self.n:
            self.extend(step, wall, value, presorted=True)
            return
        self.step, self.wall, self.value = step, wall, value
        self.n = len(step)

    def _realloc(self, cap: int) -> None:
        # New buffers, never in place: views already handed out stay valid.
        for name in ("step", "wall", "value"):
            old = getattr(self, name)
            new = np.empty(cap, dtype=old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)

    def _merge(self, step: np.ndarray, wall: np.ndarray, value: np.ndarray) -> None:
        """Points older than the last one (another rank's file): re-sort the tail only."""
        n = self.n
        cut = int(np.searchsorted(self.wall[:n], wall[0], side="left"))
        s = np.concatenate([self.step[cut:n], step])
        w = np.concatenate([self.wall[cut:n], wall])
        v = np.concatenate([self.value[cut:n], value])
        o = np.lexsort((s, w))
        if self.blocks is not None:  # the blocks after ``cut`` change
            self.blocks = self.blocks.truncated(cut)
        need = cut + len(s)
        keep = self.n
        self.n = cut
        self._realloc(max(need, int(len(self.step) * 1.5), keep))
        self.step[cut:need], self.wall[cut:need], self.value[cut:need] = s[o], w[o], v[o]
        self.n = need

    def series(self) -> Series:
        arrays = []
        for a in (self.step, self.wall, self.value):
            view = a[: self.n]
            view.flags.writeable = False
            arrays.append(view)
        if self.n >= REGISTER_MIN:
            if self.blocks is None:
                self.blocks = Blocks()
            register(arrays[2], self.blocks)
        return Series(*arrays)

    def nbytes(self) -> int:
        return self.step.nbytes + self.wall.nbytes + self.value.nbytes


def in_order(step: np.ndarray, wall: np.ndarray, value: np.ndarray):
    """The batch as ``Column.extend`` keeps it: sorted by wall time then step, stably."""
    if len(step) > 1 and not _is_sorted(wall, step):
        o = np.lexsort((step, wall))
        return step[o], wall[o], value[o]
    return step, wall, value


def _is_sorted(wall: np.ndarray, step: np.ndarray) -> bool:
    # Slices, not np.diff: on the many short columns of a large log folder the call costs count.
    w0, w1 = wall[:-1], wall[1:]
    if not (w1 >= w0).all():
        return False
    tie = w1 == w0
    return not tie.any() or bool((step[1:][tie] >= step[:-1][tie]).all())
