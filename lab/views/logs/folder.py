"""One folder of event files as the Logs page sees it: its runs, their scalars, their
hyperparameters.

Owns the join of the readers of ``lab.events`` (scalars: one ``RunReader`` per event folder;
hyperparameters: ``HparamsReader``) into the runs the page lists: a lab run folder's ``tb/`` and
``sys/`` as one run (``lab.views.runscalars.group_parts``), and the child folder ``add_hparams``
writes folded into the run that wrote it (``lab.views.logs.hparams_table``).

Reading is lazy where the folder is large. The runs are listed incrementally
(``lab.views.logs.listing``); a folder of at most ``EAGER_RUNS`` event folders is then read whole on
each refresh (each file from where the last refresh stopped), as TensorBoard does. A larger one
(a runs folder after months of use: 2,000 event folders for 1,000 runs) reads a run's files only
when its scalars are asked for (the runs drawn), and every run's final metrics only after
``read_everything()`` (the page's button): its first screen needs the names of its runs and their
hyperparameters (a byte search a file), not every point of every run.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lab.events import RunReader, refresh_runs
from lab.events.cache import EventCache, enabled
from lab.views import runscalars
from lab.views.logs import hparams_table
from lab.views.logs.listing import RunListing

EAGER_RUNS = 200  # event folders: up to this many, every refresh reads them all
MAX_WARNINGS = 200


class LogFolder:
    """The runs below ``root`` as displayed; call ``refresh()`` before reading them.

    One per folder may be shared by sessions (it locks itself).
    """

    def __init__(self, root: str | Path, hparams_reader: Any, cache: bool = True) -> None:
        self.root = Path(root)
        self.hparams = hparams_reader
        self.listing = RunListing(root)
        # one cache for all the folder's readers: each of its own would look up its place again
        self.cache: EventCache | bool = EventCache() if enabled(cache) else False
        self.groups: dict[str, list[str]] = {}
        self.everything = False  # read every run even when the folder is large
        self._readers: dict[str, RunReader] = {}
        self._gone: list[str] = []
        self._lock = threading.RLock()

    @property
    def lazy(self) -> bool:
        """Whether runs are read only when asked for (a large folder, until ``read_everything``)."""
        return len(self._readers) > EAGER_RUNS and not self.everything

    def refresh(self) -> None:
        """List the runs again (only folders that changed) and, unless lazy, read what every reader
        has not seen yet."""
        with self._lock:
            names = self.listing.runs()
            for gone in set(self._readers) - set(names):
                self._gone.append(f"{gone}: run folder deleted; dropped")
                del self._readers[gone]
            for n in names:
                if n not in self._readers:
                    self._readers[n] = RunReader(self.root / n, cache=self.cache)
            del self._gone[:-MAX_WARNINGS]
            if not self.lazy:  # the small files of all runs as one batch
                refresh_runs(list(self._readers.values()))
            # even when lazy: add_hparams' child folders must fold into their runs, and finding
            # hyperparameters is a byte search a file (1,000 lab runs: 0.37 s, then 0.1 s)
            self.hparams.refresh()
            grouped = runscalars.group_parts(names)
            self.groups = hparams_table.fold_sessions(
                grouped, self.hparams.sessions(), self._has_scalars
            )

    def read_everything(self) -> None:
        """Read every run from now on, however large the folder."""
        self.everything = True
        self.refresh()

    def _has_scalars(self, part: str) -> bool:
        r = self._readers.get(part)
        # a lazy folder has not read its runs' scalars: a parent of a session folder is taken as
        # a run with scalars (Keras' parents without scalars are then shown folded)
        return r is not None and (self.lazy or bool(r.tags()))

    @property
    def run_names(self) -> list[str]:
        return sorted(self.groups)

    @property
    def warnings(self) -> list[str]:
        with self._lock:
            out = list(self._gone)
            for name, r in sorted(self._readers.items()):
                out += [f"{name}: {w}" for w in r.warnings]
        return out[-MAX_WARNINGS:] + list(self.hparams.warnings)

    def _part(self, name: str) -> dict[str, Any]:
        r = self._readers.get(name)
        if r is None:
            return {}
        if self.lazy:
            r.refresh()  # incremental: only what was written since it was last asked for
        return r.scalars()

    def scalars(self, run: str) -> dict[str, Any]:
        """A displayed run's tag -> Series, its parts merged; empty for an unknown run."""
        with self._lock:
            return runscalars.merge_parts(self._part(p) for p in self.groups.get(run, []))

    def scalars_of(self, runs: Iterable[str]) -> dict[str, dict[str, Any]]:
        return {r: self.scalars(r) for r in runs}

    def _known_scalars(self, run: str) -> dict[str, Any]:
        """What was read of a run so far, reading nothing (a lazy folder's unread runs: empty)."""
        with self._lock:
            parts = [self._readers.get(p) for p in self.groups.get(run, [])]
            return runscalars.merge_parts(r.scalars() for r in parts if r is not None)

    def hp_rows(self) -> list[hparams_table.HpRow]:
        """The hyperparameters table's rows (sessions in event files, then lab run.json configs);
        a lazy folder's metrics are those of the runs read so far."""
        scalars_of = self._known_scalars if self.lazy else self.scalars
        return hparams_table.hp_rows(
            self.root, self.groups, self.hparams.sessions(), self.hparams.metrics(), scalars_of
        )

    def hparam_order(self) -> list[str]:
        return self.hparams.hparam_names()
