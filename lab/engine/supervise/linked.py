"""Which folders of event files belong to a run: ``events_dirs`` in status.json.

A trainer run's curves are in ``<run>/tb``. A user's script writes wherever
it likes, so the supervisor looks for them without asking the user to change
the script: the folder given with ``--events-dir`` (linked from the start,
even before it exists), ``<run>/tb`` once it holds event files (for scripts
that read ``TENSORBOARD_LOGDIR``), and every
folder below the script's working directory that holds an event file
created after the launch (``SummaryWriter()`` writes ``./runs/<date>_<host>``
by default). An event file's name carries its creation time and the writer's
pid (``events.out.tfevents.<time>.<host>.<pid>.<n>``): a file older than the
launch is someone else's, and a file whose pid is known but not one of the
run's processes is another run's (two scripts in one folder do not link each
other's curves). Whether a file is an event file is ``lab.events``' test;
nothing here reads one. The walk is bounded so that a big working directory
costs little: hidden folders, ``node_modules``, ``__pycache__``,
``site-packages`` and other runs' folders (those holding a run.json) are
skipped, it goes breadth first, ``MAX_DEPTH`` folders deep at most, and reads
``MAX_ENTRIES`` entries at most (a folder too big for what is left is
skipped, the smaller ones still read); the supervisor scans every ``SCAN_EVERY_S`` seconds
and once more at the end. Folders once linked stay linked.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from itertools import islice
from pathlib import Path
from typing import Iterable

from lab.events.reader import file_origin, is_event_file
from lab.runfolder import RUN_JSON, SCRIPT, TB_DIR, TRAINER

log = logging.getLogger(__name__)

SCAN_EVERY_S = 5.0
MAX_DEPTH = 6
MAX_ENTRIES = 20_000
# hidden ones (.git, .venv) too
SKIP = {"node_modules", "__pycache__", "site-packages", "venv", "env"}


def _ours(name: str, since: float, pids: set[int] | None) -> bool:
    created, pid = file_origin(name)
    if created is None or created < int(since) - 1:  # names round the time down to the second
        return False
    return pids is None or pid is None or pid in pids


def find_event_dirs(
    root: Path | str, since: float, pids: set[int] | None = None
) -> tuple[list[str], bool]:
    """``(folders below root holding an event file of ours, whether the walk stopped at its
    bounds)``."""
    found: list[str] = []
    left, bounded = MAX_ENTRIES, False
    # breadth first: ./runs/<date>_<host> is found before a deep tree's end
    queue = deque([(str(root), 0)])
    while queue:
        folder, depth = queue.popleft()
        try:
            with os.scandir(folder) as it:
                # never more than the budget left, however big the folder
                items = list(islice(it, left + 1))
        except OSError:
            continue
        # too big for what is left: skipped, the smaller ones are still looked at
        if len(items) > left:
            bounded = True
            continue
        left -= len(items)
        names = {e.name for e in items}
        if depth > 0 and RUN_JSON in names:  # another run of the lab: its tb/ is its own
            continue
        if any(is_event_file(n) and _ours(n, since, pids) for n in names):
            found.append(os.path.abspath(folder))
        for e in items:
            if e.name.startswith(".") or e.name in SKIP or not e.is_dir(follow_symlinks=False):
                continue
            if depth + 1 <= MAX_DEPTH:
                queue.append((e.path, depth + 1))
    return sorted(found), bounded


class EventLinker:
    """The ``events_dirs`` of one run, found again every ``SCAN_EVERY_S`` while it runs."""

    def __init__(self, run: dict, run_dir: Path, since: float | None = None) -> None:
        self.kind = run.get("kind") or TRAINER
        self.run_dir = Path(run_dir)
        self.since = time.time() if since is None else since
        cfg = run.get("config") or {}
        self.cwd = run.get("cwd") or cfg.get("cwd") or ""
        if self.kind != SCRIPT:
            # the trainer writes there, rank 0 only
            self.dirs: list[str] = [str(self.run_dir / TB_DIR)]
        else:  # a folder the user named is linked from the start; the rest once event files show up
            self.dirs = [str(cfg["events_dir"])] if cfg.get("events_dir") else []
        self.pids: set[int] = set()
        self.bounded = False
        self._next = 0.0

    def note(self, pids: Iterable[int]) -> None:
        """Processes seen in the run's tree: only their event files are linked."""
        self.pids.update(int(p) for p in pids)

    def scan(self, force: bool = False) -> bool:
        """Look for new folders (at most every ``SCAN_EVERY_S`` unless ``force``); True when some
        were added."""
        if self.kind != SCRIPT or not self.cwd or (not force and time.monotonic() < self._next):
            return False
        self._next = time.monotonic() + SCAN_EVERY_S
        found, bounded = find_event_dirs(self.cwd, self.since, self.pids or None)
        # TENSORBOARD_LOGDIR, below no cwd
        found += find_event_dirs(self.run_dir / TB_DIR, self.since)[0]
        if bounded and not self.bounded:
            log.warning(
                "stopped looking for event files below %s after %d entries; give --events-dir",
                self.cwd,
                MAX_ENTRIES,
            )
        self.bounded = bounded
        new = [d for d in found if d not in self.dirs]
        self.dirs += new
        return bool(new)
