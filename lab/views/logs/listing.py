"""Which folders below a root hold event files, found again cheaply: the Logs page's run list.

Owns the incremental form of ``lab.events.discover`` (the same answer: every folder directly
holding ``*tfevents*`` files, relative to the root, ``"."`` for the root, the event cache's
folder left out). A folder's entries are kept with its mtime: adding, removing or renaming an
entry changes it, so a folder whose mtime holds is not listed again and a look at 2,000 run
folders that did not change costs one ``stat`` per folder instead of a walk that lists them all.
A folder changed within ``runfolder.SETTLED_NS`` of the look is listed every time (file times
move in coarse ticks: two changes in one tick leave the mtime as it was).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from lab.events.cache import CACHE_DIRNAME
from lab.events.reader import is_event_file
from lab.runfolder import SETTLED_NS


class RunListing:
    """The event-file folders below ``root``; ``runs()`` looks again, listing only what changed."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = os.fspath(root)
        # folder -> (mtime_ns, its subfolders, whether it directly holds event files)
        self._kept: dict[str, tuple[int, tuple[str, ...], bool]] = {}
        self._lock = threading.Lock()
        self.listed = 0  # folders listed (not answered from memory) by the last look

    def _entries(self, folder: str) -> tuple[tuple[str, ...], bool] | None:
        try:
            mtime = os.stat(folder).st_mtime_ns
        except OSError:
            self._kept.pop(folder, None)
            return None
        kept = self._kept.get(folder)
        if kept is not None and kept[0] == mtime:
            return kept[1], kept[2]
        subs, events = [], False
        try:
            with os.scandir(folder) as it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):  # as os.walk: links not followed
                            if e.name != CACHE_DIRNAME:
                                subs.append(e.name)
                        elif is_event_file(e.name):
                            events = True
                    except OSError:
                        continue
        except OSError:
            return None  # unreadable: skipped, as os.walk does
        self.listed += 1
        if time.time_ns() - mtime > SETTLED_NS:
            self._kept[folder] = (mtime, tuple(sorted(subs)), events)
        return tuple(sorted(subs)), events

    def runs(self) -> list[str]:
        """Every folder below the root directly holding event files, as relative paths, sorted."""
        with self._lock:
            self.listed = 0
            found: list[str] = []
            seen: set[str] = set()
            stack = [self.root]
            while stack:
                folder = stack.pop()
                got = self._entries(folder)
                if got is None:
                    continue
                seen.add(folder)
                subs, events = got
                if events:
                    rel = os.path.relpath(folder, self.root)
                    found.append("." if rel == os.curdir else Path(rel).as_posix())
                stack.extend(os.path.join(folder, s) for s in subs)
            for gone in set(self._kept) - seen:  # deleted folders are forgotten
                del self._kept[gone]
            return sorted(found)
