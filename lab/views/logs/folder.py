"""One folder of event files as the Logs page sees it: its runs, their scalars, their
hyperparameters.

Owns the join of the two readers of ``lab.events`` (scalars:
``LogdirReader``; hyperparameters: ``HparamsReader``) into the runs the page
lists: a lab run folder's ``tb/`` and ``sys/`` as one run
(``lab.views.runscalars.group_parts``), and the child folder ``add_hparams``
writes folded into the run that wrote it (``lab.views.logs.hparams_table``).
Both readers are handed in (the page shares cached ones), so this stays a
plain object a test builds on real files.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lab.views import runscalars
from lab.views.logs import hparams_table


class LogFolder:
    """The runs below ``root`` as displayed; call ``refresh()`` before reading them."""

    def __init__(self, root: str | Path, reader: Any, hparams_reader: Any) -> None:
        self.root = Path(root)
        self.reader = reader
        self.hparams = hparams_reader
        self.groups: dict[str, list[str]] = {}

    def refresh(self) -> None:
        """Read what both readers have not seen yet (incremental) and regroup the runs."""
        self.reader.refresh()
        self.hparams.refresh()
        grouped = runscalars.group_parts(self.reader.run_names())
        self.groups = hparams_table.fold_sessions(
            grouped, self.hparams.sessions(), lambda r: bool(self.reader.tags(r))
        )

    @property
    def run_names(self) -> list[str]:
        return sorted(self.groups)

    @property
    def warnings(self) -> list[str]:
        return list(self.reader.warnings) + list(self.hparams.warnings)

    def scalars(self, run: str) -> dict[str, Any]:
        """A displayed run's tag -> Series, its parts merged; empty for an unknown run."""
        return runscalars.merge_parts(self.reader.scalars(p) for p in self.groups.get(run, []))

    def scalars_of(self, runs: Iterable[str]) -> dict[str, dict[str, Any]]:
        return {r: self.scalars(r) for r in runs}

    def hp_rows(self) -> list[hparams_table.HpRow]:
        """The hyperparameters table's rows (sessions in event files, then lab run.json configs)."""
        return hparams_table.hp_rows(
            self.root, self.groups, self.hparams.sessions(), self.hparams.metrics(), self.scalars
        )

    def hparam_order(self) -> list[str]:
        return self.hparams.hparam_names()
