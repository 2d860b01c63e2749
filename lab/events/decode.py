"""Scalar points out of a batch of Event records, decoded column-wise with numpy.

Owns the step from verified record payloads (``lab.events.tfrecord.scan``) to
columns ``tag, step, wall_time, value``. The common shapes
(``Event{wall_time, step, summary{value{tag, simple_value}}}`` from
SummaryWriter/tensorboardX) are decoded for all records at once by a minimal
protobuf field walker that advances one field per numpy pass over the batch.
Tensor values (TF2 ``tf.summary.scalar``, torch ``new_style``) peek at the
plugin name and decode only a ``scalars`` tensor; those tensors, and anything
the walker does not understand, are handed to ``lab.events.protobuf`` (imported
only then) for that record. Images, histograms, graphs and text are never
decoded: their fields are skipped by length.
"""

from __future__ import annotations

import numpy as np

from lab.events.points import Points, TensorValue, WholeEvent

_EVENT = {1: 1, 2: 0, 5: 2}  # field -> wire type: wall_time, step, summary
_SUMMARY = {1: 2}  # value (repeated)
_VALUE = {1: 2, 2: 5, 8: 2, 9: 2}  # tag, simple_value, tensor, metadata


def _varint(u8: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varints at positions ``q``: (value as int64, byte count; 0 = malformed)."""
    last = len(u8) - 1
    b = u8[np.minimum(q, last)]
    val = (b & 0x7F).astype(np.uint64)
    nb = np.ones(len(q), dtype=np.int64)
    cont = np.flatnonzero(b & 0x80)
    k = 1
    while len(cont) and k < 10:  # most varints are one byte: touch only the rest
        bb = u8[np.minimum(q[cont] + k, last)]
        val[cont] |= (bb & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        nb[cont] += 1
        cont = cont[(bb & 0x80) != 0]
        k += 1
    nb[cont] = 0
    return val.view(np.int64), nb


def _walk(u8: np.ndarray, s: np.ndarray, e: np.ndarray, wanted: dict[int, int]):
    """Walk the fields of n messages spanning [s, e).

    Returns (start, end, count) per wanted field (last occurrence wins, as in
    protobuf) and a ``bad`` mask for messages the walker cannot follow.
    """
    n = len(s)
    start = {f: np.full(n, -1, dtype=np.int64) for f in wanted}
    end = {f: np.full(n, -1, dtype=np.int64) for f in wanted}
    count = {f: np.zeros(n, dtype=np.int32) for f in wanted}
    bad = np.zeros(n, dtype=bool)
    p = s.copy()
    idx = np.flatnonzero(p < e)
    while len(idx):
        key, nb = _varint(u8, p[idx])
        fno = key >> 3
        wt = key & 7
        vpos = p[idx] + nb
        fend = np.full(len(idx), -1, dtype=np.int64)
        vstart = vpos.copy()
        m1 = wt == 1
        fend[m1] = vpos[m1] + 8
        m5 = wt == 5
        fend[m5] = vpos[m5] + 4
        m02 = np.flatnonzero((wt == 0) | (wt == 2))
        if len(m02):
            v, nb2 = _varint(u8, vpos[m02])
            is2 = wt[m02] == 2
            fend[m02] = np.where(is2, vpos[m02] + nb2 + v, vpos[m02] + nb2)
            vstart[m02[is2]] = vpos[m02[is2]] + nb2[is2]
            fend[m02[nb2 == 0]] = -1
            fend[m02[is2 & (v < 0)]] = -1
        broken = (nb == 0) | (fend < 0) | (fend > e[idx])
        for f, want_wt in wanted.items():
            m = (fno == f) & ~broken
            if not m.any():
                continue
            bad[idx[m & (wt != want_wt)]] = True
            sel = idx[m]
            start[f][sel] = vstart[m]
            end[f][sel] = fend[m]
            count[f][sel] += 1
        bad[idx[broken]] = True
        p[idx] = np.where(broken, e[idx], fend)
        idx = idx[(p[idx] < e[idx]) & ~bad[idx]]
    return start, end, count, bad


def _gather(u8: np.ndarray, pos: np.ndarray, width: int, dtype: str) -> np.ndarray:
    win = np.lib.stride_tricks.as_strided(u8, shape=(len(u8) - width + 1, width), strides=(1, 1))
    return win[pos].view(dtype).ravel()


def _distinct(h: np.ndarray, peel: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """(index of each distinct value's first occurrence, each item's group).

    A batch usually holds a handful of tags: peeling them off one compare at
    a time is several times cheaper than the sort inside ``np.unique``.
    """
    inv = np.full(len(h), -1, dtype=np.int32)
    first: list[int] = []
    left = np.arange(len(h))
    while len(left) and len(first) < peel:
        i = int(left[0])
        same = h[left] == h[i]
        inv[left[same]] = len(first)
        first.append(i)
        left = left[~same]
    if len(left):
        _, f2, inv2 = np.unique(h[left], return_index=True, return_inverse=True)
        inv[left] = inv2.ravel().astype(np.int32) + len(first)
        first += left[f2].tolist()
    return np.array(first, dtype=np.int64), inv


_KEEP = np.array([(1 << (8 * j)) - 1 for j in range(9)], dtype=np.uint64)  # low j bytes


def _group_tags(u8: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Distinct tags of n byte spans and each span's index into them, vectorised.

    Each span is read as 8-byte words (bytes past its end zeroed) and the
    words are hashed; every span is then compared word for word with its
    group's first span, so a hash collision can never merge two tags.
    """
    n = len(s)
    if n == 0:
        return [], np.zeros(0, dtype=np.int32)
    ln = e - s
    nwords = max(1, (int(ln.max()) + 7) // 8)
    if int(s.max()) + 8 * nwords > len(u8):  # a word may run past the buffer: pad a copy
        u8 = np.concatenate([u8, np.zeros(8 * nwords, dtype=np.uint8)])
    # Every 8 bytes from each offset as one (unaligned) uint64: one gather a word.
    word_at = np.ndarray((len(u8) - 7,), dtype="<u8", buffer=u8, strides=(1,))
    words = np.empty((n, nwords), dtype=np.uint64)
    h = ln.astype(np.uint64)
    short = int(ln.min())
    for k in range(nwords):
        w = word_at[s + 8 * k]
        if short < 8 * (k + 1):  # zero the bytes beyond the tag
            w &= _KEEP[np.clip(ln - 8 * k, 0, 8)]
        words[:, k] = w
        h = (h ^ w) * np.uint64(1099511628211)
    first, inv = _distinct(h)
    rep = first[inv]
    same = (words == words[rep]).all(axis=1) & (ln == ln[rep])
    tags = [bytes(u8[s[i] : e[i]]).decode("utf-8", "replace") for i in first.tolist()]
    if not same.all():  # a collision: name those spans one by one
        lookup = {t: i for i, t in enumerate(tags)}
        for i in np.flatnonzero(~same).tolist():
            t = bytes(u8[s[i] : e[i]]).decode("utf-8", "replace")
            inv[i] = lookup.setdefault(t, len(lookup))
        tags = list(lookup)
    return tags, inv


def _template(u8: np.ndarray, s: np.ndarray, e: np.ndarray):
    """The exact byte shape SummaryWriter and tensorboardX write for a scalar.

    ``09 <wall f64> [10 <step varint>] 2a L1 0a L2 0a TL <tag> 15 <value f32>``
    with every length one byte and each message ending where its parent
    does. Checking that shape for all records at once costs a few numpy
    passes; records that differ in any byte go to the general walker.
    Returns (ok mask, step, tag start, tag end, value position).
    """
    last = len(u8) - 1
    # Every 2 bytes from each offset as one (unaligned) uint16: a type byte and the length
    # after it in one gather. A position past the buffer reads garbage that fails the "ends
    # where its parent does" test (every end is inside the buffer).
    u16 = np.ndarray((max(last, 0),), dtype="<u2", buffer=u8, strides=(1,))

    def pair(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        w = u16[np.minimum(pos, last - 1)]
        return w & 0xFF, (w >> 8).astype(np.int64)

    kind, _ = pair(s)
    ok = (kind == 0x09) & (e - s >= 17)
    q = s + 9
    kind, _ = pair(q)
    has_step = kind == 0x10
    step, nb = _varint(u8, q + 1)
    ok &= ~has_step | (nb > 0)
    step = np.where(has_step, step, 0)
    q = np.where(has_step, q + 1 + nb, q)
    kind, size = pair(q)
    ok &= (kind == 0x2A) & (size < 0x80) & (size + q + 2 == e)
    q = q + 2
    kind, size = pair(q)
    ok &= (kind == 0x0A) & (size < 0x80) & (size + q + 2 == e)
    q = q + 2
    kind, tag_len = pair(q)
    tag_s = q + 2
    tag_e = tag_s + tag_len
    ok &= (kind == 0x0A) & (tag_len < 0x80) & (pair(tag_e)[0] == 0x15) & (tag_e + 5 == e)
    return ok, step, tag_s, tag_e, tag_e + 1


def decode(buf: bytes, starts: np.ndarray, ends: np.ndarray, plugins: dict[str, str]) -> Points:
    """Scalar points of the records at [starts, ends) of ``buf``.

    ``plugins`` maps tag -> plugin name seen so far in this run (TensorBoard
    writers often send the metadata only with a tag's first value); it is
    updated in place.
    """
    u8 = np.frombuffer(buf, dtype=np.uint8)
    rec, tag_s, tag_e, steps, wall_time, values, todo = _columns(u8, buf, starts, ends)
    tags, tag_idx = _group_tags(u8, tag_s, tag_e)
    undecodable = 0
    if todo:
        from lab.events import protobuf  # TensorBoard's protos, loaded only when a file needs them

        slow = protobuf.SlowPath(buf, plugins)
        slow.run(todo)
        undecodable = slow.undecodable
        lookup = {t: k for k, t in enumerate(tags)}
        extra_idx = np.array([lookup.setdefault(t, len(lookup)) for t in slow.tag], dtype=np.int32)
        tags = list(lookup)
        rec = np.concatenate([rec, np.array(slow.rec, dtype=np.int64)])
        tag_idx = np.concatenate([tag_idx, extra_idx])
        steps = np.concatenate([steps, np.array(slow.step, dtype=np.int64)])
        wall_time = np.concatenate([wall_time, np.array(slow.wall, dtype=np.float64)])
        values = np.concatenate([values, np.array(slow.value, dtype=np.float64)])
        if len(rec) > 1:  # put the paths back into record order
            order = np.argsort(rec, kind="stable")
            tag_idx, steps, wall_time, values = (
                tag_idx[order],
                steps[order],
                wall_time[order],
                values[order],
            )
    return Points(
        tags, tag_idx, steps.astype(np.int64), wall_time.astype(np.float64), values, undecodable
    )


def _columns(u8: np.ndarray, buf: bytes, starts: np.ndarray, ends: np.ndarray):
    """The simple_value points of the records, in record order, and the work for protobuf.

    Returns (record, tag start, tag end, step, wall_time, value, todo).
    """
    ok, f_step, f_tag_s, f_tag_e, f_val = _template(u8, starts, ends)
    fast = np.flatnonzero(ok)
    rest = np.flatnonzero(~ok)
    g_rec, g_step, g_tag_s, g_tag_e, g_val, g_wall, todo = _general(
        u8, buf, starts[rest], ends[rest], rest
    )
    if not len(g_rec):  # records the template missed gave no point (e.g. a file's header)
        wall_time = _gather(u8, starts[fast] + 1, 8, "<f8")
        values = _gather(u8, f_val[fast], 4, "<f4").astype(np.float64)
        return fast, f_tag_s[fast], f_tag_e[fast], f_step[fast], wall_time, values, todo
    rec = np.concatenate([fast, g_rec])
    tag_s = np.concatenate([f_tag_s[fast], g_tag_s])
    tag_e = np.concatenate([f_tag_e[fast], g_tag_e])
    steps = np.concatenate([f_step[fast], g_step])
    wall_pos = np.concatenate([starts[fast] + 1, g_wall])
    wall_time = np.where(wall_pos >= 0, _gather(u8, np.maximum(wall_pos, 0), 8, "<f8"), 0.0)
    values = _gather(u8, np.concatenate([f_val[fast], g_val]), 4, "<f4").astype(np.float64)
    if len(fast) and len(rec) > 1:
        order = np.argsort(rec, kind="stable")
        rec, tag_s, tag_e, steps, wall_time, values = (
            a[order] for a in (rec, tag_s, tag_e, steps, wall_time, values)
        )
    return rec, tag_s, tag_e, steps, wall_time, values, todo


def _general(u8: np.ndarray, buf: bytes, starts: np.ndarray, ends: np.ndarray, rec: np.ndarray):
    """Any Event layout: walk the fields level by level; list tensors and oddities for protobuf.

    Returns the simple_value points as (record, step, tag start, tag end,
    value position, wall_time position or -1), and the work for protobuf in
    record order (``WholeEvent`` and ``TensorValue`` items).
    """
    ev_s, ev_e, ev_c, ev_bad = _walk(u8, starts, ends, _EVENT)
    slow = np.flatnonzero(ev_bad | (ev_c[5] > 1)).tolist()
    sel = np.flatnonzero((ev_c[5] == 1) & ~ev_bad)
    su_s, su_e, su_c, su_bad = _walk(u8, ev_s[5][sel], ev_e[5][sel], _SUMMARY)
    one = (su_c[1] == 1) & ~su_bad
    slow += sel[~one & ((su_c[1] > 1) | su_bad)].tolist()
    sel = sel[one]
    va_s, va_e, va_c, va_bad = _walk(u8, su_s[1][one], su_e[1][one], _VALUE)
    slow += sel[va_bad].tolist()
    good = ~va_bad
    simple = good & (va_c[2] > 0)
    tensor = good & (va_c[2] == 0) & (va_c[8] > 0)
    tag_s = np.where(va_c[1] > 0, va_s[1], 0)
    tag_e = np.where(va_c[1] > 0, va_e[1], 0)
    step = np.zeros(len(starts), dtype=np.int64)
    has_step = np.flatnonzero(ev_c[2] > 0)
    step[has_step] = _varint(u8, ev_s[2][has_step])[0]
    wall_pos = np.where(ev_c[1] > 0, ev_s[1], -1)
    wall = np.where(wall_pos >= 0, _gather(u8, np.maximum(wall_pos, 0), 8, "<f8"), 0.0)

    # In record order, as the writer wrote them: a tag's plugin is the one
    # in its first metadata, and a tensor counts only once that is known.
    todo: list[WholeEvent | TensorValue] = [
        WholeEvent(int(rec[i]), int(starts[i]), int(ends[i])) for i in slow
    ]
    for j in np.flatnonzero(good & ((va_c[9] > 0) | tensor)).tolist():
        i = int(sel[j])
        todo.append(
            TensorValue(
                int(rec[i]),
                bytes(buf[tag_s[j] : tag_e[j]]).decode("utf-8", "replace"),
                (int(va_s[9][j]), int(va_e[9][j])) if va_c[9][j] else None,
                (int(va_s[8][j]), int(va_e[8][j])) if tensor[j] else None,
                float(wall[i]),
                int(step[i]),
            )
        )
    todo.sort(key=lambda item: item.rec)
    r = sel[simple]
    return rec[r], step[r], tag_s[simple], tag_e[simple], va_s[2][simple], wall_pos[r], todo
