"""The runs a comparison is made of: ``CompareRun`` (a registry record and what comparing needs of
it), foreign TensorBoard logs as runs, the runs offered and chosen by default, names, provenance.

Pure: the caller passes the registry's records (the engine reconciles them with the processes);
this module reads only run.json, status.json and the event files of the folders it is given.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from lab.engine.preflight import expectations as preflight
from lab.engine.registry import RunRecord
from lab.engine.spec import sweep as sweep_record
from lab.engine.spec.run import processes
from lab.events import discover
from lab.events.reader import file_origin
from lab.runfolder import (
    RUN_JSON,
    SCRIPT,
    SUCCEEDED,
    SYS_DIR,
)
from lab.runrecords import RunFile, holds_run_files, read_run, read_status
from lab.views.live.script_run import outside_dirs
from lab.views.runscalars import many_folder_scalars

SAMPLE_PREFIX = "sample/"
# a CompareRun's kind for foreign logs (a registry record's is "trainer" or "script")
FOREIGN = "foreign"


NO_RUNS = "No runs to compare yet: launch a sweep on the Launch page (or restore sample_data/runs)."
SAMPLES_ONLY = (
    "You have no runs of your own yet: showing the sample runs shipped in sample_data/runs."
)


@dataclass(frozen=True)
class CompareRun:
    """One run as Compare sees it; ``key`` is unique across the user's runs and the samples."""

    key: str
    record: RunRecord
    sample: bool = False
    recorded_on: str | None = None  # run.json's, for the provenance line only
    host: str | None = None
    # run.json's: the scaling its Compare-modes sweep was made under (lab.views.compare.scaling)
    scaling: str | None = None
    # cores the launcher gave it (OMP_NUM_THREADS x processes): a CPU share's whole
    cpu_cores: int | None = None
    foreign: bool = False  # foreign logs: no record of the lab's, only event files and sys/
    # status.json's, as the supervisor wrote them: start and end, and whether the machine was busy
    started_at: str | None = None
    ended_at: str | None = None
    interference: dict | None = None
    # run.json's: the options its knob sweep varied and this run's values (lab.engine.sweep.vary)
    varied: dict | None = None
    # status.json's: the most processes of its tree that trained at once (several under single
    # placement: a script that starts its own DDP)
    train_processes: int | None = None
    # preflight.json's expectations' texts (cores shared, DP on one device), in its order
    expectations: tuple[str, ...] = ()
    # its place in its sweep's record (the plan's order: a sweep makes its runs in one second)
    sweep_index: int | None = None

    @property
    def made(self) -> tuple[str, int]:
        """The order runs were made in: created_at, then (the same second) the sweep's order."""
        return self.created_at, -1 if self.sweep_index is None else self.sweep_index

    @property
    def varied_text(self) -> str:
        """The varied options and values, ``"bucket-cap-mb=25 accum-steps=4"``; "" without."""
        return " ".join(f"{k}={shown_value(v)}" for k, v in (self.varied or {}).items())

    @property
    def kind(self) -> str:
        """``trainer`` or ``script`` (the registry's), or ``FOREIGN``."""
        return FOREIGN if self.foreign else self.record.kind

    @property
    def event_folders(self) -> list[str]:
        """The folders this run's scalars are read from: the run folder, then a script's linked
        folders outside it.

        A trainer's curves are always in its own tb/ (its recorded absolute path may be stale if the
        runs folder moved); a folder that has gone since reads as empty."""
        return [str(self.run_dir), *(outside_dirs(self.record) if self.kind == SCRIPT else [])]

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def run_dir(self) -> Path:
        return Path(self.record.run_dir)

    @property
    def name(self) -> str:
        return self.record.name or self.record.run_id

    @property
    def created_at(self) -> str:
        return self.record.created_at or ""

    @property
    def sweep_id(self) -> str | None:
        return self.record.sweep_id

    @property
    def state(self) -> str | None:
        return self.record.state

    @property
    def config(self) -> dict:
        return self.record.config

    @property
    def summary(self) -> dict | None:
        return self.record.summary

    def option(self, key: str) -> Any:
        """A trainer option: summary.json's config first (what ran), else run.json's."""
        sc = (self.summary or {}).get("config")
        if isinstance(sc, dict) and key in sc:
            return sc[key]
        return self.config.get(key)


def from_record(record: RunRecord, *, sample: bool = False) -> CompareRun:
    """A registry record as a ``CompareRun`` (``sample`` runs get keys of their own)."""
    meta = read_run(record.run_dir, kept=True)
    st = read_status(record.run_dir, kept=True)
    return CompareRun(
        key=(SAMPLE_PREFIX if sample else "") + record.run_id,
        record=record,
        sample=sample,
        recorded_on=meta.recorded_on,
        host=meta.host or (record.summary or {}).get("hostname"),
        scaling=meta.scaling,
        cpu_cores=_cores(meta),
        started_at=st.started_at,
        ended_at=st.ended_at,
        interference=st.interference,
        varied=meta.varied,
        train_processes=_int(st.train_processes),
        expectations=expectations(Path(record.run_dir)),
        sweep_index=_sweep_index(record),
    )


def _sweep_index(record: RunRecord) -> int | None:
    """The run's index in its sweep's record (``.sweeps/<id>.json`` beside the run), else None."""
    if not record.sweep_id:
        return None
    try:
        ids = sweep_record.read(Path(record.run_dir).parent, record.sweep_id).get("run_ids")
    except ValueError:  # a sweep id that is no folder name
        return None
    return ids.index(record.run_id) if isinstance(ids, list) and record.run_id in ids else None


def _int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def expectations(run_dir: Path) -> tuple[str, ...]:
    """The pre-flight's expectations saved in the run folder (``preflight.json``), as texts."""
    data = preflight.read(run_dir, kept=True) or {}
    items = data.get("expectations") if isinstance(data, dict) else None
    return tuple(str(x["text"]) for x in items or [] if isinstance(x, dict) and x.get("text"))


def shown_value(value: Any) -> str:
    """A varied value as its flag takes it: ``25`` for 25.0, ``on``/``off`` for a switch."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _cores(meta: RunFile) -> int | None:
    """The cores the launcher shared out to the run: OMP_NUM_THREADS per process times its
    processes."""
    config = meta.config or {}
    asked = SimpleNamespace(mode=config.get("mode"), nproc=config.get("nproc") or 1)
    try:
        threads = int(meta.env.get("OMP_NUM_THREADS"))
        procs = int(processes(asked))
    except (TypeError, ValueError):
        return None
    return threads * procs if threads > 0 and procs > 0 else None


def _holds_run(folder: Path) -> bool:
    # a lab run has one of its records (status.json, run.json, summary.json); foreign logs none
    return holds_run_files(folder)


def _foreign(folder: Path) -> CompareRun:
    """Foreign logs as a run: named after their folder, dated by their oldest event file."""
    times = [
        t for run in discover(folder) for n in os.listdir(folder / run) if (t := file_origin(n)[0])
    ]
    created = (
        datetime.fromtimestamp(min(times), timezone.utc).isoformat(timespec="seconds")
        if times
        else None
    )
    record = RunRecord(
        run_id=folder.name,
        run_dir=str(folder),
        state="unknown",
        mode=None,
        name=folder.name,
        created_at=created,
        exit_code=None,
        diagnosis=None,
        config={},
        sweep_id=None,
        progress=None,
        summary=None,
    )
    return CompareRun(key=str(folder), record=record, foreign=True)


def foreign_logs(folder: Path) -> CompareRun | None:
    """A folder of event files that is no lab run (foreign logs) as a run; else None."""
    folder = Path(folder).expanduser().resolve()
    if not folder.is_dir() or _holds_run(folder) or not discover(folder):
        return None
    return _foreign(folder)


def foreign_runs(root: Path) -> list[CompareRun]:
    """Folders right under ``root`` with device samples in ``sys/`` and no file of a lab run (newest
    first)."""
    try:
        folders = sorted(
            Path(e.path) for e in os.scandir(root) if e.is_dir() and not e.name.startswith(".")
        )
    except OSError:
        return []
    found = [
        _foreign(f.resolve())
        for f in folders
        # a lab run answers from the listing's memory; only the rest are walked
        if not _holds_run(f) and (f / SYS_DIR).is_dir() and discover(f / SYS_DIR)
    ]
    return sorted(found, key=lambda r: r.created_at, reverse=True)


def comparable(records: Sequence[RunRecord]) -> list[RunRecord]:
    """The records Compare can read: a run whose run.json is damaged has no config to compare
    (Home and ``lab status`` list it ``unreadable``, naming the file)."""
    return [r for r in records if RUN_JSON not in r.unreadable]


def available_runs(
    user: Sequence[RunRecord], samples: Sequence[RunRecord], user_root: Path
) -> list[CompareRun]:
    """The user's runs (``user``, newest first), foreign logs with device samples in
    ``user_root``, then the sample runs."""
    return (
        [from_record(r) for r in comparable(user)]
        + foreign_runs(user_root)
        + [from_record(r, sample=True) for r in comparable(samples)]
    )


def read_scalars(runs: Sequence[CompareRun], reader: Callable[[str], Any]) -> dict[str, dict]:
    """Each run's event series by key, read from its folders (a script's linked ones too) with
    ``reader`` (a folder -> ``lab.events`` reader)."""
    return many_folder_scalars({r.key: r.event_folders for r in runs}, reader)


DEFAULT_MAX = 10  # the default selection's cap: a sweep of more runs shows its newest


def _newest_sweep(runs: Sequence[CompareRun]) -> list[str]:
    """The keys of the newest sweep among ``runs`` (at most ``DEFAULT_MAX``, the newest); none
    without a sweep."""
    swept = [r for r in runs if r.sweep_id]
    if not swept:
        return []
    newest = max(swept, key=lambda r: (r.created_at, r.run_id)).sweep_id
    keys = [r.key for r in sorted(swept, key=lambda r: r.created_at) if r.sweep_id == newest]
    return keys[-DEFAULT_MAX:]


def default_selection(runs: Sequence[CompareRun]) -> list[str]:
    """Keys to compare by default.

    The newest sweep among the user's own runs; without a sweep, the user's
    newest finished runs (those with a summary); with no runs of the user's own,
    the sample runs by the same rule (the newest sample sweep: the shipped folder holds two, a
    Compare-modes and a device-count sweep, never to be mixed). Never more than ``DEFAULT_MAX``
    (the newest). A user's script has no summary: one that succeeded counts as finished.
    """
    own = [r for r in runs if not r.sample]
    swept = _newest_sweep(own)
    if swept:
        return swept
    ended = [r for r in own if r.summary or (r.kind == SCRIPT and r.state == SUCCEEDED)]
    finished = sorted(ended, key=lambda r: r.created_at, reverse=True)[:DEFAULT_MAX]
    if finished:
        return [r.key for r in reversed(finished)]
    samples = [r for r in runs if r.sample]
    swept = _newest_sweep(samples)
    if swept:
        return swept
    return [r.key for r in sorted(samples, key=lambda r: r.created_at)][-DEFAULT_MAX:]


def labels(runs: Sequence[CompareRun]) -> dict[str, str]:
    """Short, unique display names by key: the run's name, suffixed by its id when names clash."""

    def base(r: CompareRun) -> str:
        return ("sample: " if r.sample and not r.name.startswith("sample") else "") + r.name

    count = Counter(base(r) for r in runs)
    return {r.key: base(r) if count[base(r)] == 1 else f"{base(r)} ({r.run_id})" for r in runs}


def provenance(runs: Sequence[CompareRun]) -> list[str]:
    """Where and when the runs were recorded: one line per machine, runs listed with their start."""
    names = labels(runs)
    by_where: dict[str, list[str]] = {}
    for r in runs:
        when = r.created_at[:16].replace("T", " ") if r.created_at else "unknown time"
        by_where.setdefault(str(r.recorded_on or r.host or "an unknown machine"), []).append(
            f"{names[r.key]} ({when})"
        )
    return [f"Recorded on {where}: {', '.join(items)}" for where, items in by_where.items()]
