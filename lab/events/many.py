"""Many small event files read as one batch: the per-file numpy set-up paid once.

Owns the small-file path of a refresh. A folder of thousands of runs holds thousands of
files of a few thousand records each, where framing and decoding one file at a time costs a
fixed ~3 ms of numpy set-up per file. Here the new bytes of every small file (at most
``SMALL`` of them) are read, joined and framed together (``tfrecord.scan_many``: one numpy
pass per record index), decoded together (``decode._columns``) and split back into per-file,
per-tag columns with one sort. A file that is anything but clean and simple — a damaged or
unfinished record, a record the column decoder hands to protobuf, an I/O error, an empty
file — is left to its own ``EventFileLoader.load()``, which reads, warns and recovers as
always; so this path changes no result, only the speed.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from lab.events import decode, tfrecord
from lab.events.cache import HEAD
from lab.events.columns import in_order
from lab.events.file_loader import EventFileLoader

log = logging.getLogger(__name__)

# A file with at most this many new bytes joins the batch: a pass of ``scan_many`` costs what
# the longest file's record count says, and the joined bytes are held at once.
SMALL = 256 << 10
# Files are batched up to this many bytes: large enough that a batch's ~1,000 numpy passes
# cost little beside its work, small enough that THREADS batches in flight stay modest.
BATCH_BYTES = 32 << 20
THREADS = 8

Columns = dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
Read = tuple[Columns, int, "bytes | None"]


def read_small(loaders: list[EventFileLoader]) -> dict[str, Read]:
    """(columns of the new points, bytes read, the file's first bytes) of each small, clean file.

    By path. The first bytes (``cache.HEAD`` of them) only when the read began at byte 0.
    Their offsets are advanced. A loader missing from the result was not touched: read it
    with ``load()``. Batches of ``BATCH_BYTES`` are decoded on a thread per core (numpy's
    gathers and ufuncs release the GIL), at most ``THREADS`` of them at once, so the bytes
    held stay bounded however large the folder.
    """
    out: dict[str, Read] = {}
    workers = max(1, min(os.cpu_count() or 1, THREADS))
    pool: ThreadPoolExecutor | None = None
    flying: deque = deque()
    batch: list[tuple[EventFileLoader, bytes]] = []
    held = 0
    try:
        for loader in loaders:
            data = loader.peek_small(SMALL)
            if data is None:  # unreadable, large, empty: the loader's own path decides
                continue
            if not data:  # read to its end already: nothing to do
                out[loader.path] = ({}, 0, None)
                continue
            batch.append((loader, data))
            held += len(data)
            if held >= BATCH_BYTES:
                if workers > 1:
                    pool = pool or ThreadPoolExecutor(workers, "lab-events")
                    flying.append((batch, pool.submit(_batch, batch)))
                else:
                    _take(batch, None, out)
                batch, held = [], 0
                while len(flying) >= workers:
                    _take(*flying.popleft(), out)
        if batch:
            flying.append((batch, None))
        while flying:
            _take(*flying.popleft(), out)
    finally:
        if pool is not None:
            pool.shutdown()
    return out


def _take(batch: list[tuple[EventFileLoader, bytes]], future, out: dict[str, Read]) -> None:
    got = future.result() if future is not None else _batch(batch)
    for (loader, data), cols in zip(batch, got):
        if cols is not None:
            start = data[:HEAD] if loader.offset == 0 else None
            loader.advance(len(data))
            out[loader.path] = (cols, len(data), start)


def _batch(items: list[tuple[EventFileLoader, bytes]]) -> list[Columns | None]:
    try:
        return decode_many(tfrecord.scan_many([data for _, data in items]))
    except Exception:  # a bug here must not stop reading: every file goes its own way
        log.exception("batched read of %d small event files; reading them one by one", len(items))
        return [None] * len(items)


def decode_many(ms: tfrecord.ManyScan) -> list[Columns | None]:
    """Per buffer of ``ms``: its points as tag -> (step, wall_time, value) in ``Column`` order.

    None for a buffer that is not clean or that needs protobuf (tensors, metadata,
    records the walker cannot follow): those are read alone.
    """
    nfiles = len(ms.clean)
    result: list[Columns | None] = [None] * nfiles
    keep = np.repeat(ms.clean, np.diff(ms.bounds))
    starts, ends = ms.starts[keep], ms.ends[keep]
    files = np.flatnonzero(ms.clean)
    if not len(files):
        return result
    bounds = np.zeros(len(files) + 1, dtype=np.int64)
    np.cumsum(np.diff(ms.bounds)[files], out=bounds[1:])
    u8 = np.frombuffer(ms.buf, dtype=np.uint8)
    rec, tag_s, tag_e, step, wall, value, todo = decode._columns(u8, ms.buf, starts, ends)
    ok = np.ones(len(files), dtype=bool)
    if todo:
        ok[np.searchsorted(bounds, [t.rec for t in todo], side="right") - 1] = False
    for f in files[ok].tolist():
        result[f] = {}
    if not len(rec):
        return result
    owner = np.searchsorted(bounds, rec, side="right") - 1
    tags, tag_idx = decode._group_tags(u8, tag_s, tag_e)
    key = owner * len(tags) + tag_idx
    # Points are in record order: a stable sort by (file, tag) keeps each column in it.
    order = np.argsort(key.astype(np.uint16) if key.max() < 1 << 16 else key, kind="stable")
    key, step, wall, value = key[order], step[order], wall[order], value[order]
    cut = np.flatnonzero(np.diff(key)) + 1
    first = np.concatenate([[0], cut])
    last = np.concatenate([cut, [len(key)]])
    # Each column as Column.extend keeps it: note the few that are not in (wall, step) order.
    dw, ds = np.diff(wall), np.diff(step)
    unsorted = (dw < 0) | ((dw == 0) & (ds < 0))
    unsorted[cut - 1] = False
    messy = set(np.searchsorted(cut, np.flatnonzero(unsorted), side="right").tolist())
    ntags = len(tags)
    for k, (a, b, kk) in enumerate(zip(first.tolist(), last.tolist(), key[first].tolist())):
        cols = result[files[kk // ntags]]
        if cols is None:
            continue
        arrays = (step[a:b], wall[a:b], value[a:b])
        cols[tags[kk % ntags]] = in_order(*arrays) if k in messy else arrays
    return result
