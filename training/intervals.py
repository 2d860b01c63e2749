"""Interval arithmetic on plain lists of ``(start, end)`` spans (microseconds in a trace), so that
time is counted once however many ranges overlap: the breakdown's and the communication split's
(``training.breakdown``, ``training.comm_split``)."""

from __future__ import annotations

from typing import Iterable

Intervals = list[tuple[float, float]]


def union(spans: Iterable[tuple[float, float]]) -> Intervals:
    """Sorted, non-overlapping intervals covering the same time as ``spans``."""
    out: Intervals = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def length(spans: Intervals) -> float:
    return sum(end - start for start, end in spans)


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """The time in both (each argument already a ``union``)."""
    out: Intervals = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """The time in ``a`` and not in ``b`` (each already a ``union``)."""
    out: Intervals = []
    j = 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k, cur = j, start
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < end:
            out.append((cur, end))
    return out
