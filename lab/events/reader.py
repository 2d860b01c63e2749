"""Runs, tags and scalar columns: the reader of event-file folders.

Owns discovery (every folder below a root that directly holds
``*tfevents*`` files is a run), the run reader (``RunReader``: one
``EventFileLoader`` per file, new files picked up on each refresh, every
file's points merged into per-tag columns of ``lab.events.columns``), the
log-directory reader (``LogdirReader``: new run folders appear, deleted ones
are dropped). Nothing here raises on bad files: each
problem is a line in ``.warnings`` and what can be trusted is kept. One
file's offsets, truncation and errors live in ``lab.events.file_loader``; the small
files of every run of a refresh are read together by ``lab.events.many``, and big runs read
from scratch in worker processes by ``lab.events.apart``.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from contextlib import ExitStack
from typing import Sequence

import numpy as np

from lab.events import apart, many, tfrecord
from lab.events.cache import CACHE_DIRNAME, EventCache, FileCache, enabled
from lab.events.columns import Column, Series
from lab.events.file_loader import DELETED, EventFileLoader

log = logging.getLogger(__name__)

MAX_WARNINGS = 200


_ORIGIN = re.compile(r"tfevents\.(\d+)\.(.*)\.(\d+)\.(\d+)(?:\.v2)?$")  # time, host, pid, counter


def file_origin(name: str) -> tuple[int | None, int | None]:
    """``(creation time in whole seconds, writer pid)`` from an event file's name
    (``events.out.tfevents.<time>.<host>.<pid>.<n>``); None where it does not say."""
    m = _ORIGIN.search(name)
    if m:
        return int(m.group(1)), int(m.group(3))
    m = re.search(r"tfevents\.(\d+)", name)  # tensorboardX leaves the pid out
    return (int(m.group(1)) if m else None), None


def is_event_file(name: str) -> bool:
    return "tfevents" in name


def _cache_of(cache: bool | EventCache) -> EventCache | None:
    if isinstance(cache, EventCache):
        return cache
    return EventCache() if enabled(cache) else None


class RunReader:
    """Every event file directly inside one run folder, merged, read incrementally.

    ``cache``: keep each file's columns on disk (``lab.events.cache``) and start from them;
    False (or ``$LAB_EVENTS_CACHE=0``) reads every file from its first byte.
    """

    def __init__(self, path: str | os.PathLike, cache: bool | EventCache = True) -> None:
        self.path = str(path)
        self._cache = _cache_of(cache)
        self._file_caches: dict[str, FileCache] = {}
        self.gone = False
        self._listed = False
        self.warnings: list[str] = []
        self._files: dict[str, EventFileLoader] = {}
        self._cols: dict[str, Column] = {}
        self._plugins: dict[str, str] = {}
        self._lock = threading.RLock()
        self._restored = 0
        self._ready = False

    def _warn(self, msg: str) -> None:
        log.info("%s", msg)  # .warnings is how users see it; the log is for us
        self.warnings.append(msg)
        del self.warnings[:-MAX_WARNINGS]

    def refresh(self) -> int:
        """Read what was appended since the last call; the number of new points."""
        with self._lock:
            return self._finish(many.read_small(self._prepare()))

    def _prepare(self) -> list[EventFileLoader]:
        """List the folder (new files, restored from the cache): the files to read next."""
        with self._lock:
            self._restored = 0
            self._ready = False  # set once the folder was listed: only then are files read
            try:
                return self._list()
            except Exception as exc:  # the page must keep drawing what it has
                log.exception("reading %s", self.path)
                self._warn(f"{self.path}: unexpected error while reading ({exc}); will retry")
                return []

    def _finish(self, batched: dict[str, many.Read]) -> int:
        """Read every file, taking the columns ``lab.events.many`` read already; new points."""
        with self._lock:
            if not self._ready:
                return 0
            try:
                return self._restored + self._read_all(batched)
            except Exception as exc:
                log.exception("reading %s", self.path)
                self._warn(f"{self.path}: unexpected error while reading ({exc}); will retry")
                return 0

    def _list(self) -> list[EventFileLoader]:
        if self.gone:
            return []
        try:
            names = sorted(
                e.name for e in os.scandir(self.path) if is_event_file(e.name) and e.is_file()
            )
        except FileNotFoundError:
            if not self._listed:  # never there yet: it may still be created
                if not self.warnings or "no such folder" not in self.warnings[-1]:
                    self._warn(f"{self.path}: no such folder yet")
                return []
            self.gone = True  # deleted: final
            self._warn(f"{self.path}: folder deleted; showing what was read before")
            return []
        except OSError as exc:
            self._warn(f"{self.path}: cannot list folder ({exc.strerror}); will retry")
            return []
        self._listed = self._ready = True
        for name in names:
            p = os.path.join(self.path, name)
            if p not in self._files:
                loader = self._files[p] = EventFileLoader(p, self._warn, self._plugins)
                if self._cache is not None:
                    self._restored += self._restore(loader, self._cache.file(p))
        for fc in self._file_caches.values():
            fc.begin()  # before any byte is read, batched or not: the entry's content time
        return list(self._files.values())

    def _cold(self, batched: dict[str, many.Read]) -> bool:
        """Never read, and every file is to be read from byte 0 outside the small-file batch."""
        return (
            self._cache is not None
            and self._ready
            and not self._cols
            and bool(self._files)
            and all(f.offset == 0 and p not in batched for p, f in self._files.items())
        )

    def _relist(self) -> None:
        """Forget the files listed, none of them read, and list them again from their entries."""
        self._files.clear()
        self._file_caches.clear()
        self._plugins.clear()
        self._prepare()

    def _read_all(self, batched: dict[str, many.Read]) -> int:
        added = 0
        for p, loader in list(self._files.items()):
            fc = self._file_caches.get(p)
            got = batched.get(p)
            if got is not None:
                added += self._commit(loader, fc, got[0], True, got[1] > 0, got[2])
                continue
            added += self._read(loader, fc)
            if loader.state == DELETED:  # a file of that name written later is a new file
                del self._files[p]
                if fc is not None:
                    fc.forget()
                    del self._file_caches[p]
        return added

    def _restore(self, loader: EventFileLoader, fc: FileCache) -> int:
        """Start a new file from its cache entry, if one still describes it."""
        self._file_caches[loader.path] = fc
        entry = fc.restore()
        if entry is None:
            return 0
        for tag, plugin in entry.plugins.items():
            self._plugins.setdefault(tag, plugin)
        loader.resume(entry.offset, entry.notes)
        for tag, arrays in entry.columns().items():
            col = self._cols.get(tag) or self._cols.setdefault(tag, Column())
            col.adopt(*arrays)
        return len(entry.step)

    def _read(self, loader: EventFileLoader, fc: FileCache | None = None) -> int:
        # Points of all chunks are joined per tag before they reach the
        # columns, so a first load allocates each column exactly once.
        pending: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
        before = loader.offset
        if fc is not None:
            fc.begin()
        try:
            for pts in loader.load():
                for sl in tfrecord.group_by_value(pts.tag_idx):
                    tag = pts.tags[int(pts.tag_idx[sl[0]])]
                    pending.setdefault(tag, []).append(
                        (pts.step[sl], pts.wall_time[sl], pts.value[sl])
                    )
        finally:
            joined = {
                tag: tuple(np.concatenate(c) if len(parts) > 1 else c[0] for c in zip(*parts))
                for tag, parts in pending.items()
            }
            added = self._commit(loader, fc, joined, False, loader.offset != before)
        return added

    def _commit(
        self,
        loader: EventFileLoader,
        fc: FileCache | None,
        joined: many.Columns,
        presorted: bool,
        grew: bool,
        start: bytes | None = None,
    ) -> int:
        """Points read from one file into the columns (and its cache entry); how many."""
        added = 0
        for tag, arrays in joined.items():
            col = self._cols.get(tag) or self._cols.setdefault(tag, Column())
            col.extend(*arrays, presorted=presorted)
            added += len(arrays[0])
        if fc is not None:  # every point yielded is in ``joined``, up to loader.offset
            fc.update(loader.offset, joined, self._plugins, loader.notes, grew, start)
        return added

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


def refresh_runs(readers: Sequence[RunReader]) -> int:
    """``refresh()`` of every reader in one pass; the number of new points.

    Every run lists its files first, so the small files of all of them are read as one batch
    (``lab.events.many``: the per-file set-up paid once); each run is held from its listing to
    its last file, as its own ``refresh()`` holds it.
    """
    with ExitStack() as held:
        for r in readers:
            held.enter_context(r._lock)
        loaders = [f for r in readers for f in r._prepare()]
        batched = many.read_small(loaders)
        cold = [r for r in readers if r._cold(batched)]
        n = apart.workers(len(cold))
        if n:  # big runs read from scratch: each in a worker, handed back through the cache
            apart.run_apart(_fill_cache, [(r.path, r._cache) for r in cold], n)
            for r in cold:
                r._relist()
        return sum(r._finish(batched) for r in readers)


def _fill_cache(path: str, cache: EventCache) -> None:
    """In a worker process (``lab.events.apart``): read a run whole, writing its cache entries."""
    RunReader(path, cache).refresh()


def discover(root: str | os.PathLike) -> list[str]:
    """Every run below ``root``: folders directly holding event files, as relative paths.

    The root itself is ``"."``. Unreadable folders are skipped, and so is the event cache
    (``.lab-cache``). One ``scandir`` a folder and no ``stat``: the directory entries'
    types say what is a folder (symbolic links to folders are not followed, as ``os.walk``).
    """
    runs: list[str] = []
    todo = [(str(root), "")]
    while todo:
        path, rel = todo.pop()
        try:
            with os.scandir(path) as it:
                entries = list(it)
        except OSError:
            continue
        holds = False
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                if e.name != CACHE_DIRNAME:
                    todo.append((e.path, f"{rel}/{e.name}" if rel else e.name))
            elif not holds and is_event_file(e.name) and e.is_file():
                holds = True
        if holds:
            runs.append(rel or ".")
    return sorted(runs)


class LogdirReader:
    """All runs below a root folder; new runs appear on refresh, deleted ones are dropped.

    ``cache``: as ``RunReader``'s (``lab.events.cache``); ``cache=False`` or
    ``$LAB_EVENTS_CACHE=0`` bypasses it.
    """

    def __init__(self, root: str | os.PathLike, cache: bool | EventCache = True) -> None:
        self.root = str(root)
        self._cache = _cache_of(cache)
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
        runs = self._discover()
        added = refresh_runs([r for _, r in runs])
        self._drop_gone(runs)
        return added

    def _discover(self) -> list[tuple[str, RunReader]]:
        """The runs below the root now (new ones get a reader), before they are read."""
        if not os.path.isdir(self.root):
            if not self._root_missing:
                self._own_warnings.append(f"{self.root}: no such folder")
            self._root_missing = True
        else:
            self._root_missing = False
        for name in discover(self.root):
            if name not in self._runs:
                path = os.path.normpath(os.path.join(self.root, name))
                self._runs[name] = RunReader(
                    path, self._cache if self._cache is not None else False
                )
        return list(self._runs.items())

    def _drop_gone(self, runs: list[tuple[str, RunReader]]) -> None:
        for name, r in runs:
            if r.gone:  # final: a deleted run does not come back under this reader
                self._own_warnings.append(f"{name}: run folder deleted; dropped")
                del self._runs[name]
        del self._own_warnings[:-MAX_WARNINGS]

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


def refresh_all(readers: Sequence[LogdirReader]) -> int:
    """``refresh()`` of several folders' readers as one batch (``refresh_runs``): Compare's
    thousand run folders, a reader each, one by one paid a batch's numpy passes (one per
    record) each; choosing 1,000 runs took 27 s here so, 10 s now (AppTest, cold, 2 cores).
    The new points; a folder that fails is read alone, and says why in its ``warnings``."""
    # held in one order (by folder) by every caller: two pages' batches never wait on each other
    unique = sorted({id(r): r for r in readers}.values(), key=lambda r: (r.root, id(r)))
    try:
        with ExitStack() as held:
            for r in unique:
                held.enter_context(r._lock)
            found = [r._discover() for r in unique]
            added = refresh_runs([run for runs in found for _, run in runs])
            for r, runs in zip(unique, found):
                r._drop_gone(runs)
            return added
    except Exception:
        log.exception("batched refresh of %d folders; reading them one by one", len(unique))
        return sum(r.refresh() for r in unique)
