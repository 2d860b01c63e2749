"""TFRecord framing and its masked CRC-32C: the byte layer under event files.

A TensorBoard event file is a sequence of records, each
``uint64 length | uint32 masked_crc(length) | payload | uint32 masked_crc(payload)``
(little endian). This module owns that layer only: ``scan`` splits a byte
range into verified payload spans and says where to resume, and ``frame``
writes one record (used by tests and the benchmark to write real files fast).
The CRC is the C ``crc32c`` package; the 8-byte length CRCs of a whole batch
are checked at once with a numpy table walk, since calling C per record costs
more than the CRC itself.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")
_U32 = struct.Struct("<I")


def _make_table() -> np.ndarray:
    poly = 0x82F63B78  # CRC-32C (Castagnoli), reflected
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ poly, table >> 1).astype(np.uint32)
    return table


_TABLE = _make_table()
_PY_TABLE = [int(v) for v in _TABLE]


@functools.cache
def _c_crc32c() -> Callable[[bytes | memoryview], int] | None:
    """The C implementation, imported on first use: the package's import costs ~40 ms (it reads
    its own version from the installed metadata), most of a warm reader's start-up, which never
    checks a CRC. The pure-Python fallback is ~100x slower."""
    try:
        from crc32c import crc32c as f
    except ImportError:  # pragma: no cover - exercised only without the package
        return None
    return f


def crc32c(data: bytes | memoryview) -> int:
    """Plain CRC-32C of ``data``."""
    c = _c_crc32c()
    if c is not None:
        return c(data)
    crc = 0xFFFFFFFF
    for b in bytes(data):
        crc = _PY_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def mask(crc: int) -> int:
    """TensorFlow's masked form: rotate right by 15 bits, add a constant."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def masked_crc(data: bytes | memoryview) -> int:
    return mask(crc32c(data))


def _mask_np(crc: np.ndarray) -> np.ndarray:
    crc = crc.astype(np.uint32)
    return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(_MASK_DELTA)


_TABLES: dict[int, tuple[np.ndarray, np.uint32]] = {}


def _tables(length: int) -> tuple[np.ndarray, np.uint32]:
    """Per-position byte tables for messages of one length.

    CRC is linear over GF(2): the CRC of an L-byte message is a constant
    XOR one table entry per byte position. That turns the sequential byte
    loop into L independent gathers over all same-length records at once.
    """
    got = _TABLES.get(length)
    if got is None:
        tables = np.empty((length, 256), dtype=np.uint32)
        v = _TABLE.copy()
        for k in range(length - 1, -1, -1):
            tables[k] = v
            v = _TABLE[v & 0xFF] ^ (v >> np.uint32(8))
        c = 0xFFFFFFFF
        for _ in range(length):
            c = _PY_TABLE[c & 0xFF] ^ (c >> 8)
        got = _TABLES[length] = (tables, np.uint32(c ^ 0xFFFFFFFF))
        if len(_TABLES) > 4096:  # many distinct lengths: do not keep them all
            _TABLES.clear()
    return got


def group_by_value(values: np.ndarray) -> list[np.ndarray]:
    """Indices of ``values`` (integers) grouped by equal value, each group in index order.

    Groups come in value order. Values within 65,536 of each other (tag indices, record
    lengths) take one stable radix sort and a count, several times cheaper than a compare
    pass per distinct value.
    """
    if len(values) == 0:
        return []
    lo = int(values.min())
    span = int(values.max()) - lo
    if span < 1 << 16:
        key = (values - lo).astype(np.uint16)
        order = np.argsort(key, kind="stable")  # a radix sort for 16-bit keys
        counts = np.bincount(key, minlength=span + 1)
        return np.split(order, np.cumsum(counts[counts > 0])[:-1])
    order = np.argsort(values, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(values[order])) + 1)


def _crcs(u8: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Masked CRC-32C of each span, batched by length (C per record for long ones)."""
    out = np.empty(len(starts), dtype=np.uint32)
    long_ones = []
    for g in group_by_value(lengths):
        length = int(lengths[g[0]])
        if length > 256 or len(g) < 8 or length == 0:
            long_ones.append(g)
            continue
        tables, const = _tables(length)
        mat = _window(u8, length)[starts[g]]
        crc = np.full(len(g), const, dtype=np.uint32)
        for k in range(length):
            np.bitwise_xor(crc, tables[k].take(mat[:, k]), out=crc)
        out[g] = crc
    if long_ones:
        g = np.concatenate(long_ones)
        f = _c_crc32c() or crc32c
        data = u8.data
        out[g] = [f(data[s : s + n]) for s, n in zip(starts[g].tolist(), lengths[g].tolist())]
    return _mask_np(out)


def frame(payload: bytes) -> bytes:
    """One complete record around ``payload``."""
    header = struct.pack("<Q", len(payload))
    return header + _U32.pack(masked_crc(header)) + payload + _U32.pack(masked_crc(payload))


@dataclass
class Scan:
    """What ``scan`` found in a buffer.

    ``starts``/``ends``: payload spans (offsets into the buffer) whose CRCs
    matched. ``consumed``: bytes that need never be read again; the rest is a
    record still being written. ``bad_payloads``: records skipped for a
    payload CRC mismatch. ``skipped``: ``(offset, bytes)`` for each damaged
    length (its CRC fails) and the bytes passed over to the next offset where
    a length, its CRC and its payload's CRC all verify.
    """

    starts: np.ndarray
    ends: np.ndarray
    consumed: int
    bad_payloads: int = 0
    skipped: list[tuple[int, int]] = field(default_factory=list)


def _frame(buf: bytes, pos: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    """Record heads and payload lengths of every complete record, and where they end.

    Following lengths is inherently sequential. Python walks a few dozen
    records; when their lengths repeat with a short period (a writer logging
    the same tags each step), the next thousands of heads are predicted from
    that pattern and confirmed all at once by reading the length at every
    predicted head; the walk goes back to Python at the first surprise.
    """
    n = len(buf)
    u8 = np.frombuffer(buf, dtype=np.uint8)
    unpack = _HEADER.unpack_from
    heads: list[int] = []
    lens: list[int] = []
    recent: list[int] = []  # the latest lengths, where a period is looked for
    done_h: list[np.ndarray] = []
    done_l: list[np.ndarray] = []
    block = 1024
    while True:
        walked = 0
        while pos + 12 <= n and walked < 64:
            size = unpack(buf, pos)[0]
            end = pos + size + 16
            if end > n:
                break
            heads.append(pos)
            lens.append(size)
            pos = end
            walked += 1
        if walked < 64:
            break
        recent = (recent + lens[-64:])[-64:]
        period = next((p for p in range(1, 33) if recent[-p:] == recent[-2 * p : -p]), 0)
        if not period:
            continue
        pred_len = np.tile(np.array(recent[-period:], dtype=np.int64), -(-block // period))
        pred_end = pos + np.cumsum(pred_len + 16)
        fits = int(np.searchsorted(pred_end, n, side="right"))
        pred_len = pred_len[:fits]
        pred_head = pred_end[:fits] - pred_len - 16
        hit = _gather_u64(u8, pred_head) == pred_len
        m = fits if hit.all() else int(np.argmin(hit))
        if m == 0:
            block = 1024
            continue
        done_h += [np.array(heads, dtype=np.int64), pred_head[:m]]
        done_l += [np.array(lens, dtype=np.int64), pred_len[:m]]
        heads, lens = [], []
        recent = pred_len[max(0, m - 64) : m].tolist()
        pos = int(pred_head[m - 1] + pred_len[m - 1] + 16)
        block = min(block * 4, 1 << 20) if m == fits else 1024
    done_h.append(np.array(heads, dtype=np.int64))
    done_l.append(np.array(lens, dtype=np.int64))
    return np.concatenate(done_h), np.concatenate(done_l), pos


def _gather_u64(u8: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return _window(u8, 8)[np.minimum(pos, len(u8) - 8)].view("<u8").ravel().astype(np.int64)


def _window(u8: np.ndarray, width: int) -> np.ndarray:
    """Every ``width`` consecutive bytes as a row, without copying."""
    return np.lib.stride_tricks.as_strided(u8, shape=(len(u8) - width + 1, width), strides=(1, 1))


def scan(buf: bytes) -> Scan:
    """Split ``buf`` into records, checking both CRCs of each.

    A record cut short at the end of ``buf`` is left unconsumed (not an
    error) so the caller can resume at ``consumed`` once more bytes exist.
    After a damaged length, reading goes on at the next record that verifies
    (``_resync``); every pass moves forward, so this never loops.
    """
    u8 = np.frombuffer(buf, dtype=np.uint8)
    starts, ends, skipped = [], [], []
    bad_payloads = 0
    pos = 0
    while True:
        s, e, consumed, bad, broken = _verified_from(buf, u8, pos)
        starts.append(s)
        ends.append(e)
        bad_payloads += bad
        if broken is None:
            break
        nxt = _resync(buf, u8, broken + 1)
        skipped.append((broken, nxt - broken))
        consumed = pos = nxt
    return Scan(np.concatenate(starts), np.concatenate(ends), consumed, bad_payloads, skipped)


def _verified_from(buf: bytes, u8: np.ndarray, pos: int):
    """Records from ``pos`` up to the first damaged length (its offset, or None)."""
    n = len(buf)
    head, length, pos = _frame(buf, pos)
    broken = None
    consumed = pos
    if len(head):
        got = _crcs(u8, head, np.full(len(head), 8, dtype=np.int64))
        bad = np.flatnonzero(got != _gather_u32(u8, head + 8))
        if len(bad):
            broken = consumed = int(head[int(bad[0])])
            head, length = head[: int(bad[0])], length[: int(bad[0])]
    if broken is None and pos + 12 <= n:
        # The walk stopped on a record that does not fit: a writer still
        # writing it, or a damaged length that claims more than exists.
        if _HEADER.unpack_from(buf, pos)[1] != masked_crc(memoryview(buf)[pos : pos + 8]):
            broken = pos
    starts = head + 12
    ends = starts + length
    bad_payloads = 0
    if len(starts):
        ok = _crcs(u8, starts, length) == _gather_u32(u8, ends)
        bad_payloads = int(len(ok) - np.count_nonzero(ok))
        if bad_payloads:
            starts, ends = starts[ok], ends[ok]
    return starts, ends, consumed, bad_payloads, broken


def _resync(buf: bytes, u8: np.ndarray, pos: int) -> int:
    """The first offset >= ``pos`` where a record may resume.

    A candidate's length CRC must verify and, if its record lies wholly in
    ``buf``, its payload CRC too; one that runs past the end is kept (its
    payload is checked when the rest is read). With no candidate, all but the
    last 11 bytes (which may yet begin a header) are passed over.
    """
    n = len(buf)
    last = n - 12  # the last offset where a header and its CRC fit
    if pos > last:
        return max(pos, n - 11)
    heads = np.arange(pos, last + 1, dtype=np.int64)
    ok = _crcs(u8, heads, np.full(len(heads), 8, dtype=np.int64)) == _gather_u32(u8, heads + 8)
    for q in heads[ok].tolist():
        size = _HEADER.unpack_from(buf, q)[0]
        if q + 16 + size > n:
            return q
        if _U32.unpack_from(buf, q + 12 + size)[0] == masked_crc(
            memoryview(buf)[q + 12 : q + 12 + size]
        ):
            return q
    return max(pos, n - 11)


def _gather_u32(u8: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Little-endian uint32 stored at each of ``pos`` (any alignment)."""
    return _window(u8, 4)[pos].view("<u4").ravel()


@dataclass
class ManyScan:
    """What ``scan_many`` found in several whole buffers joined into ``buf``.

    Records of buffer ``i`` are ``starts[bounds[i]:bounds[i + 1]]`` (offsets into ``buf``).
    ``clean[i]``: every byte of buffer ``i`` is a record whose two CRCs verify; a buffer
    that is not (a damaged or unfinished record) is to be scanned alone with ``scan``.
    """

    buf: bytes
    starts: np.ndarray
    ends: np.ndarray
    bounds: np.ndarray
    clean: np.ndarray


def scan_many(bufs: list[bytes]) -> ManyScan:
    """Records of many small buffers at once: one numpy pass per record *index*, not per file.

    Following lengths is sequential within a file, but files are independent: each pass
    advances every file still being walked by one record, so the numpy set-up is paid once
    per pass for all files instead of once per file (small files cost ~3 ms each alone).
    A pass costs what the longest buffer's record count says: meant for small buffers.
    """
    buf = b"".join(bufs)
    u8 = np.frombuffer(buf, dtype=np.uint8)
    sizes = np.fromiter((len(b) for b in bufs), dtype=np.int64, count=len(bufs))
    base = np.zeros(len(bufs) + 1, dtype=np.int64)
    np.cumsum(sizes, out=base[1:])
    end = base[1:]
    pos = base[:-1].copy()
    idx = np.flatnonzero(pos + 12 <= end)
    heads, owners = [], []
    # Every 8 bytes from each offset as one (unaligned) int64: a length is one gather.
    u64 = np.ndarray((max(len(u8) - 7, 0),), dtype="<i8", buffer=u8, strides=(1,))
    while len(idx):
        p = pos[idx]
        size = u64[p]  # a length past 2**63 reads negative: it never fits
        fits = (size >= 0) & (size <= end[idx] - p - 16)
        if not fits.all():
            idx, p, size = idx[fits], p[fits], size[fits]
        heads.append(p)
        owners.append(idx)
        pos[idx] = p + size + 16
        idx = idx[pos[idx] + 12 <= end[idx]]
    clean = pos == end
    counts = np.bincount(np.concatenate(owners), minlength=len(bufs)) if owners else sizes * 0
    bounds = np.zeros(len(bufs) + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    head = np.empty(int(bounds[-1]), dtype=np.int64)
    for k, (p, who) in enumerate(zip(heads, owners)):  # record k of each file walked that far
        head[bounds[who] + k] = p
    if len(head):
        bad = _crcs(u8, head, np.full(len(head), 8, dtype=np.int64)) != _gather_u32(u8, head + 8)
        length = _gather_u64(u8, head)
        starts = head + 12
        ends = starts + length
        bad |= _crcs(u8, starts, length) != _gather_u32(u8, ends)
        if bad.any():
            clean[np.unique(np.searchsorted(bounds, np.flatnonzero(bad), side="right") - 1)] = False
    else:
        starts = ends = head
    return ManyScan(buf, starts, ends, bounds, clean)
