"""The on-disk cache of each event file's scalar columns: a second visit reads no record twice.

Owns where an entry lives, its format, when it is trusted and when it is rewritten. One entry
per event file, keyed by the file's path, size and modification time:

- under ``<the file's folder>/.lab-cache/`` when that folder is inside the lab's runs folder
  (``lab.runfolder.runs_dir()``) and writable; else in the user cache folder
  (``$XDG_CACHE_HOME/parallel-training-lab/events/`` or ``~/.cache/...``), named after the
  file's absolute path (not resolved: cheap); ``$LAB_EVENTS_CACHE_DIR`` puts every entry in
  that folder instead.
  A folder that cannot be written has no cache; reading goes on uncached.
- an entry is ``<sha1 of its key>.evcache``: an 8-byte magic, a JSON header (key, size,
  mtime, the byte offset reached, tags and their point counts, the run's plugin names, the
  file's content warnings), the step/wall_time/value columns as raw little-endian
  int64/float64 (``np.frombuffer``: nothing parsed, nothing pickled) and a CRC-32 of it all
  (zlib's: importing the C ``crc32c`` package costs a warm reader more than its speed saves).
  (An ``.npz`` costs 0.75 ms a load here, ten times a whole entry read this way.)
- trusted whole when size and mtime match and the file had not changed for 2 s before it was
  read; otherwise, if the file is at least as long as the offset and its first 4 KiB still
  match, reading resumes at the offset (a file that grew reads only its new bytes); otherwise
  it is ignored, as is any entry that is truncated, corrupt or of another format, and
  rewritten after the file is read again.
- written atomically (temp file, then rename) after a file's first read, then when its offset
  has doubled, or when a refresh found nothing new and the last write is 5 s old (a finished
  live run catches up): rewrites cost O(file) each, so a growing file costs O(file) in all.

Only what the reader returns is cached: scalar columns. ``LAB_EVENTS_CACHE=0`` (or a reader's
``cache=False``) turns it off; deleting the cache changes no result.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field

import numpy as np

from lab.events.columns import in_order
from lab.runfolder import runs_dir

log = logging.getLogger(__name__)

CACHE_DIRNAME = ".lab-cache"
SUFFIX = ".evcache"
MAGIC = b"LABEVC02"  # 01: CRC-32C checks
HEAD = 4096  # bytes of the file's start whose CRC-32 an entry keeps
RACY_NS = 2_000_000_000  # a file changed this close to its read may change again unseen
QUIET_WRITE_S = 5.0
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")

Columns = dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]


def enabled(flag: bool = True) -> bool:
    """The cache is on unless ``flag`` is False or ``$LAB_EVENTS_CACHE`` is 0/false/no/off."""
    env = os.environ.get("LAB_EVENTS_CACHE", "1").strip().lower()
    return bool(flag) and env not in ("0", "false", "no", "off")


def user_dir() -> str:
    """Where entries of folders outside the runs folder go (see the module's docstring)."""
    explicit = os.environ.get("LAB_EVENTS_CACHE_DIR")
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "parallel-training-lab", "events")


@dataclass
class Entry:
    """One event file's columns up to ``offset``, each tag in ``Column.extend``'s order."""

    key: str
    offset: int
    size: int
    mtime_ns: int
    read_ns: int
    head_crc: int
    tags: list[str]
    counts: list[int]
    step: np.ndarray
    wall: np.ndarray
    value: np.ndarray
    plugins: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def columns(self) -> Columns:
        out: Columns = {}
        at = 0
        for tag, n in zip(self.tags, self.counts):
            out[tag] = (self.step[at : at + n], self.wall[at : at + n], self.value[at : at + n])
            at += n
        return out


def encode(e: Entry) -> bytes:
    keys = ("key", "offset", "size", "mtime_ns", "read_ns", "head_crc", "tags", "counts")
    head = {k: getattr(e, k) for k in keys} | {"plugins": e.plugins, "notes": e.notes}
    header = json.dumps(head).encode()
    pad = b"\0" * (-(16 + len(header)) % 8)
    body = b"".join(
        [
            MAGIC,
            _U64.pack(len(header)),
            header,
            pad,
            np.ascontiguousarray(e.step, dtype="<i8").tobytes(),
            np.ascontiguousarray(e.wall, dtype="<f8").tobytes(),
            np.ascontiguousarray(e.value, dtype="<f8").tobytes(),
        ]
    )
    return body + _U32.pack(zlib.crc32(body))


def decode(data: bytes) -> Entry | None:
    """The entry in ``data``, or None when it is not a whole, intact entry."""
    try:
        if len(data) < 20 or data[:8] != MAGIC:
            return None
        if _U32.unpack_from(data, len(data) - 4)[0] != zlib.crc32(memoryview(data)[:-4]):
            return None
        hlen = _U64.unpack_from(data, 8)[0]
        h = json.loads(data[16 : 16 + hlen])
        n = sum(h["counts"])
        at = 16 + hlen + (-(16 + hlen) % 8)
        if at + 24 * n != len(data) - 4 or len(h["tags"]) != len(h["counts"]):
            return None
        cols = [np.frombuffer(data, dt, n, at + 8 * n * k) for k, dt in enumerate(("<i8", "<f8"))]
        value = np.frombuffer(data, "<f8", n, at + 16 * n)
        keys = ("key", "offset", "size", "mtime_ns", "read_ns", "head_crc", "tags", "counts")
        fields = {k: h[k] for k in keys}
        plugins, notes = dict(h["plugins"]), list(h["notes"])
        return Entry(
            **fields, step=cols[0], wall=cols[1], value=value, plugins=plugins, notes=notes
        )
    except (ValueError, KeyError, TypeError, struct.error):
        return None


def _head_crc(path: str, offset: int) -> int | None:
    try:
        with open(path, "rb") as fh:
            data = fh.read(min(offset, HEAD))
    except OSError:
        return None
    return zlib.crc32(data) if len(data) == min(offset, HEAD) else None


class EventCache:
    """Where the entries of event files live; one per reader, shared by its run readers."""

    def __init__(self) -> None:
        self.user = user_dir()
        self.explicit = bool(os.environ.get("LAB_EVENTS_CACHE_DIR"))
        self.runs = str(runs_dir())
        self._dirs: dict[str, tuple[str, str]] = {}
        self.made: set[str] = set()  # entry folders made or seen by this reader
        self.failed: set[str] = set()  # entry folders that could not be written

    def file(self, path: str) -> FileCache:
        """The cache of the event file at ``path``."""
        d, name = os.path.split(path)
        got = self._dirs.get(d)
        if got is None:
            real = os.path.abspath(d)
            inside = real == self.runs or real.startswith(self.runs + os.sep)
            if inside and not self.explicit and os.access(real, os.W_OK):
                got = (os.path.join(real, CACHE_DIRNAME), "")
            else:
                got = (self.user, real + os.sep)
            self._dirs[d] = got
        folder, prefix = got
        key = prefix + name
        digest = hashlib.sha1(key.encode("utf-8", "surrogateescape")).hexdigest()
        return FileCache(self, path, os.path.join(folder, digest + SUFFIX), key)

    def write(self, entry_path: str, data: bytes) -> bool:
        folder = os.path.dirname(entry_path)
        if folder in self.failed:
            return False
        # One temp name per process and thread: no two writers share one, and no mkstemp cost.
        tmp = f"{entry_path}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            if folder not in self.made:  # a cold folder has none yet: no failed open first
                os.makedirs(folder, exist_ok=True)
                self.made.add(folder)
            try:
                fh = open(tmp, "wb")
            except FileNotFoundError:  # removed meanwhile
                os.makedirs(folder, exist_ok=True)
                fh = open(tmp, "wb")
            with fh:
                fh.write(data)
            os.replace(tmp, entry_path)  # a concurrent reader sees the old entry or the new one
            return True
        except OSError as exc:
            log.info("event cache: cannot write in %s (%s); reading uncached there", folder, exc)
            self.failed.add(folder)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False


class FileCache:
    """One event file's entry: restored once, then kept up with the points read since."""

    def __init__(self, owner: EventCache, path: str, entry_path: str, key: str) -> None:
        self.owner = owner
        self.path = path
        self.entry_path = entry_path
        self.key = key
        self.cached = 0  # the offset the entry on disk covers
        self.stopped = False
        self._delta: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
        self._written = 0.0
        self._first = True  # the first load after a restore rewrites an entry it moved past
        self._read_ns = 0
        self._start: bytes | None = None

    def _load(self) -> Entry | None:
        try:
            with open(self.entry_path, "rb") as fh:
                data = fh.read()
        except OSError:
            return None
        e = decode(data)
        if e is None:
            log.info("event cache: %s is damaged; ignored, rebuilt", self.entry_path)
        return e if e is not None and e.key == self.key else None

    def restore(self) -> Entry | None:
        """The entry if it still describes the file's start; None to read the file from scratch."""
        e = self._load()  # first: a cold folder has no entry, and then needs no stat
        if e is None:
            return None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        exact = st.st_size == e.size and st.st_mtime_ns == e.mtime_ns
        if not (exact and e.mtime_ns < e.read_ns - RACY_NS):
            if st.st_size < e.offset or _head_crc(self.path, e.offset) != e.head_crc:
                return None
        self.cached = e.offset
        e.notes = [f"{self.path}: {n}" for n in e.notes]
        return e

    def begin(self) -> None:
        """Called before each load: the time an entry's content was read from."""
        self._read_ns = time.time_ns()

    def update(
        self,
        offset: int,
        new: Columns,
        plugins: dict,
        notes: list,
        grew: bool,
        start: bytes | None = None,
    ) -> None:
        """Points a load added up to ``offset``; the entry is rewritten when it is due.

        ``start``: the file's first bytes as that load read them, when it read from byte 0
        (at least ``HEAD`` of them, or all up to ``offset``): the entry's head CRC without
        opening the file again.
        """
        if self.stopped:
            return
        self._start = start[: min(offset, HEAD)] if start is not None else None
        for tag, arrays in new.items():
            self._delta.setdefault(tag, []).append(arrays)
        now = time.monotonic()
        first, self._first = self._first, False
        if offset <= self.cached or not (
            first
            or self.cached == 0
            or offset >= 2 * self.cached
            or (not grew and now - self._written >= QUIET_WRITE_S)
        ):
            return
        try:
            ok = self._write(offset, plugins, notes)
        except Exception:  # the cache must never stop the reading
            log.exception("event cache: writing the entry of %s", self.path)
            ok = False
        if ok:
            self.cached, self._written = offset, now
        else:
            self.stopped = True  # the delta would lack points: no entry for it from this reader
        self._delta = {}

    def _write(self, offset: int, plugins: dict, notes: list) -> bool:
        parts: dict[str, list] = {}
        if self.cached:
            base = self._load()
            if base is None or base.offset != self.cached:
                return False
            parts = {tag: [arrays] for tag, arrays in base.columns().items()}
        for tag, arrays in self._delta.items():
            parts.setdefault(tag, []).extend(arrays)
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        start = self._start
        if start is not None and len(start) == min(offset, HEAD):
            head: int | None = zlib.crc32(start)
        else:
            head = _head_crc(self.path, offset)
        if head is None:
            return False
        tags = list(parts)
        # Each tag in the order Column.extend puts it, so a restore can skip that check.
        joined = [
            in_order(*(np.concatenate(c) if len(c) > 1 else c[0] for c in zip(*parts[tag])))
            for tag in tags
        ]
        cols = [[a[k] for a in joined] for k in range(3)]
        empty = [np.zeros(0, np.int64), np.zeros(0), np.zeros(0)]
        step, wall, value = (np.concatenate(c) if c else empty[k] for k, c in enumerate(cols))
        counts = [len(a[0]) for a in joined]
        entry = Entry(
            self.key,
            offset,
            st.st_size,
            st.st_mtime_ns,
            self._read_ns,
            head,
            tags,
            counts,
            step,
            wall,
            value,
            dict(plugins),
            [n.removeprefix(self.path + ": ") for n in notes],  # the path as read next time
        )
        return self.owner.write(self.entry_path, encode(entry))

    def forget(self) -> None:
        """The file is gone: so is its entry."""
        try:
            os.unlink(self.entry_path)
        except OSError:
            pass
