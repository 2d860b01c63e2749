"""The one reader of TensorBoard event files: runs, tags and scalar columns.

Owns discovery (every folder below a root that directly holds
``*tfevents*`` files is a run), incremental reading (each file's offset is
kept; a refresh reads only the bytes written since, and picks up new files
and new run folders) and merging every file of a run into per-tag columns
(``lab.events.columns``). Files still being written, corrupt, deleted or
unreadable never raise: what can be trusted is kept and a line is added to
``.warnings``. Framing and CRCs live in ``lab.events.tfrecord``, protobuf decoding
in ``lab.events.decode``.
"""
from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

from lab.events import decode as event_decode, tfrecord
from lab.events.columns import Column, Series

log = logging.getLogger(__name__)

# Bytes read and decoded at once: small enough that the column passes over a
# batch stay in the CPU cache, and memory stays bounded on a multi-GB file.
CHUNK = 4 << 20
MAX_WARNINGS = 200


def is_event_file(name: str) -> bool:
    return "tfevents" in name


class _File:
    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self.dead = False  # a bad length CRC: nothing after it can be trusted
        self.last_error: str | None = None
        self.warned_empty = False


class RunReader:
    """Every event file directly inside one run folder, merged, read incrementally."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = str(path)
        self.gone = False
        self._listed = False
        self.warnings: list[str] = []
        self._files: dict[str, _File] = {}
        self._cols: dict[str, Column] = {}
        self._plugins: dict[str, str] = {}
        self._lock = threading.RLock()

    def _warn(self, msg: str) -> None:
        log.info("%s", msg)  # .warnings is how users see it; the log is for us
        self.warnings.append(msg)
        del self.warnings[:-MAX_WARNINGS]

    def refresh(self) -> int:
        """Read what was appended since the last call; the number of new points."""
        with self._lock:
            try:
                return self._refresh()
            except Exception as exc:  # the page must keep drawing what it has
                log.exception("reading %s", self.path)
                self._warn(f"{self.path}: unexpected error while reading ({exc}); will retry")
                return 0

    def _refresh(self) -> int:
        if self.gone:
            return 0
        try:
            names = sorted(e.name for e in os.scandir(self.path) if is_event_file(e.name) and e.is_file())
        except FileNotFoundError:
            if not self._listed:  # never there yet: it may still be created
                if not self.warnings or "no such folder" not in self.warnings[-1]:
                    self._warn(f"{self.path}: no such folder yet")
                return 0
            self.gone = True  # deleted: final
            self._warn(f"{self.path}: folder deleted; showing what was read before")
            return 0
        except OSError as exc:
            self._warn(f"{self.path}: cannot list folder ({exc.strerror}); will retry")
            return 0
        self._listed = True
        for name in names:
            p = os.path.join(self.path, name)
            if p not in self._files:
                self._files[p] = _File(p)
        added = 0
        for p, f in list(self._files.items()):
            if not f.dead:
                added += self._read_file(f)
        return added

    def _read_file(self, f: _File) -> int:
        # Points of all chunks are joined per tag before they reach the
        # columns, so a first load allocates each column exactly once.
        pending: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
        try:
            return self._read_chunks(f, pending)
        finally:
            for tag, parts in pending.items():
                col = self._cols.get(tag) or self._cols.setdefault(tag, Column())
                col.extend(*(np.concatenate(c) if len(parts) > 1 else c[0] for c in zip(*parts)))

    def _read_chunks(self, f: _File, pending: dict) -> int:
        added = 0
        size = CHUNK
        try:
            fh = open(f.path, "rb")
        except FileNotFoundError:
            self._warn(f"{f.path}: file deleted; keeping the {f.offset} bytes read before")
            del self._files[f.path]
            return 0
        except OSError as exc:
            self._io_error(f, exc)
            return 0
        with fh:
            while True:
                try:
                    fh.seek(f.offset)
                    data = fh.read(size)
                except OSError as exc:
                    self._io_error(f, exc)
                    return added
                f.last_error = None
                if not data:
                    if f.offset == 0 and not f.warned_empty:
                        f.warned_empty = True
                        self._warn(f"{f.path}: empty file (no events written yet)")
                    elif f.offset and os.fstat(fh.fileno()).st_size < f.offset and not f.warned_empty:
                        f.warned_empty = True  # rewritten from scratch: our offset means nothing now
                        self._warn(f"{f.path}: file shrank below the {f.offset} bytes already read; not re-read")
                    return added
                sc = tfrecord.scan(data)
                if len(sc.starts):
                    added += self._collect(self._decode(data, sc, f), f, pending)
                if sc.bad_payloads:
                    self._warn(f"{f.path}: skipped {sc.bad_payloads} record(s) with a bad CRC")
                f.offset += sc.consumed
                if sc.fatal:
                    f.dead = True
                    self._warn(f"{f.path}: {sc.fatal}; the rest of this file is skipped")
                    return added
                if len(data) < size:
                    return added  # end of file, maybe inside a record still being written
                if sc.consumed == 0:  # one record larger than the chunk: read it whole
                    size = int.from_bytes(data[:8], "little") + 16
                else:
                    size = CHUNK

    def _decode(self, data: bytes, sc: tfrecord.Scan, f: _File) -> event_decode.Points:
        try:
            return event_decode.decode(data, sc.starts, sc.ends, self._plugins)
        except Exception:  # a walker bug must not stall this file forever
            log.exception("column decoder failed on %s at byte %d; using protobuf", f.path, f.offset)
            return event_decode.decode_with_protobuf(data, sc.starts, sc.ends, self._plugins)

    def _io_error(self, f: _File, exc: OSError) -> None:
        msg = f"{f.path}: cannot read ({exc.strerror or exc}); will retry"
        if msg != f.last_error:  # once per distinct error, not once per refresh
            self._warn(msg)
        f.last_error = msg

    def _collect(self, pts: event_decode.Points, f: _File, pending: dict) -> int:
        if pts.undecodable:
            self._warn(f"{f.path}: skipped {pts.undecodable} record(s) that are not valid events")
        for sl in tfrecord.group_by_value(pts.tag_idx):
            tag = pts.tags[int(pts.tag_idx[sl[0]])]
            pending.setdefault(tag, []).append((pts.step[sl], pts.wall_time[sl], pts.value[sl]))
        return len(pts.tag_idx)

    def tags(self) -> list[str]:
        with self._lock:
            return sorted(self._cols)

    def scalars(self) -> dict[str, Series]:
        """A snapshot: later refreshes never change the arrays returned here."""
        with self._lock:
            return {t: c.series() for t, c in sorted(self._cols.items())}

    def nbytes(self) -> int:
        with self._lock:
            return sum(c.nbytes() for c in self._cols.values())


def discover(root: str | os.PathLike) -> list[str]:
    """Every run below ``root``: folders directly holding event files, as relative paths.

    The root itself is ``"."``. Unreadable folders are skipped.
    """
    root = str(root)
    runs = []
    for dirpath, _dirs, files in os.walk(root):
        if any(is_event_file(n) for n in files):
            rel = os.path.relpath(dirpath, root)
            runs.append("." if rel == os.curdir else Path(rel).as_posix())
    return sorted(runs)


class LogdirReader:
    """All runs below a root folder; new runs appear on refresh, deleted ones are dropped."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = str(root)
        self._runs: dict[str, RunReader] = {}
        self._own_warnings: list[str] = []
        self._root_missing = False
        self._lock = threading.RLock()

    @property
    def warnings(self) -> list[str]:
        with self._lock:
            out = list(self._own_warnings)
            for name, r in sorted(self._runs.items()):
                out += [f"{name}: {w}" for w in r.warnings]
            return out[-MAX_WARNINGS:]

    def refresh(self) -> int:
        with self._lock:
            try:
                return self._refresh()
            except Exception as exc:
                log.exception("reading %s", self.root)
                self._own_warnings.append(f"{self.root}: unexpected error ({exc}); will retry")
                return 0

    def _refresh(self) -> int:
        if not os.path.isdir(self.root):
            if not self._root_missing:
                self._own_warnings.append(f"{self.root}: no such folder")
            self._root_missing = True
        else:
            self._root_missing = False
        for name in discover(self.root):
            if name not in self._runs:
                self._runs[name] = RunReader(os.path.normpath(os.path.join(self.root, name)))
        added = 0
        for name, r in list(self._runs.items()):
            added += r.refresh()
            if r.gone:  # final: a deleted run does not come back under this reader
                self._own_warnings.append(f"{name}: run folder deleted; dropped")
                del self._runs[name]
        del self._own_warnings[:-MAX_WARNINGS]
        return added

    def run_names(self) -> list[str]:
        with self._lock:
            return sorted(self._runs)

    def run(self, name: str) -> RunReader | None:
        with self._lock:
            return self._runs.get(name)

    def scalars(self, run: str) -> dict[str, Series]:
        """The run's tags -> Series snapshot; empty for an unknown run."""
        r = self.run(run)
        return r.scalars() if r is not None else {}

    def tags(self, run: str) -> list[str]:
        r = self.run(run)
        return r.tags() if r is not None else []

    def nbytes(self) -> int:
        with self._lock:
            return sum(r.nbytes() for r in self._runs.values())


def to_frame(source: LogdirReader | RunReader | Mapping[str, Mapping[str, Series]],
             runs: Iterable[str] | None = None, tags: str | Iterable[str] | None = None,
             run_name: str = "."):
    """A long DataFrame ``run, tag, step, wall_time, value`` (pandas imported here).

    ``source``: a LogdirReader, a RunReader (its run is called ``run_name``)
    or ``{run: {tag: Series}}``. ``runs``: only these runs. ``tags``: a
    regular expression (``re.search``) or a list of tag names.
    """
    import pandas as pd

    if isinstance(source, LogdirReader):
        data = {r: source.scalars(r) for r in (source.run_names() if runs is None else runs)}
    elif isinstance(source, RunReader):
        data = {run_name: source.scalars()}
    else:
        data = {r: source[r] for r in (source if runs is None else runs) if r in source}
    if isinstance(tags, str):
        pattern = re.compile(tags)
        keep = pattern.search
    elif tags is not None:
        wanted = set(tags)
        keep = wanted.__contains__
    else:
        keep = None
    parts = []
    for run, series in data.items():
        for tag, s in series.items():
            if keep is None or keep(tag):
                parts.append((run, tag, s))
    if not parts:
        return pd.DataFrame({"run": pd.Series(dtype=str), "tag": pd.Series(dtype=str),
                             "step": pd.Series(dtype=np.int64), "wall_time": pd.Series(dtype=np.float64),
                             "value": pd.Series(dtype=np.float64)})
    counts = [len(s) for _, _, s in parts]
    return pd.DataFrame({
        "run": np.repeat(np.array([p[0] for p in parts], dtype=object), counts),
        "tag": np.repeat(np.array([p[1] for p in parts], dtype=object), counts),
        "step": np.concatenate([s.step for _, _, s in parts]),
        "wall_time": np.concatenate([s.wall_time for _, _, s in parts]),
        "value": np.concatenate([s.value.astype(np.float64, copy=False) for _, _, s in parts]),
    })
