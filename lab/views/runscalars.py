"""One run folder, one run: how the ``tb/`` and ``sys/`` parts of a run folder become one set of
scalars.

A run folder of this lab holds the trainer's events in ``tb/``, the supervisor's device samples in
``sys/`` and its health findings in ``health/`` (``lab.runfolder.TB_DIR``, ``SYS_DIR``,
``HEALTH_DIR``). ``lab.events.LogdirReader`` names each of them a run of its own; every page shows
them as one run: Live and Compare read one run folder (``run_scalars``), Logs groups the runs of any
folder by the run folder they belong to (``group_parts``). Their tags never clash (``sys/`` tags are
the supervisor's alone), so merging loses nothing; ``split_sys`` takes the device samples back out
for the charts that draw them apart. A user's script writes its curves wherever it likes:
``folder_scalars`` reads the run folder and each linked folder with a reader of its own (one per
folder, as the pages' cached readers are) and merges them; ``many_folder_scalars`` does it for
many runs at once, their small files read as one batch (``lab.events.refresh_all``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from lab.events import refresh_all
from lab.runfolder import HEALTH_DIR, SYS_DIR, TB_DIR

PARTS = (TB_DIR, SYS_DIR, HEALTH_DIR)  # health/: the supervisor's health/<key> events
SYS_PREFIX = SYS_DIR + "/"  # the supervisor's tags: sys/gpu<i>/..., sys/cpu_pct, sys/rss_mib


def run_folder_of(run_name: str) -> str:
    """The run a reader's run belongs to: ``x`` for ``x/tb``, ``x/sys`` or ``x/health``, ``.`` for
    ``tb``; else itself."""
    head, _, last = run_name.replace("\\", "/").rpartition("/")
    return (head or ".") if last in PARTS else run_name


def group_parts(run_names: Iterable[str]) -> dict[str, list[str]]:
    """Displayed run -> the reader's runs that make it up (sorted); other layouts pass through."""
    out: dict[str, list[str]] = {}
    for name in sorted(run_names):
        out.setdefault(run_folder_of(name), []).append(name)
    return out


def merge_parts(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The tag -> series mappings of several parts as one (the first part wins a clash)."""
    merged: dict[str, Any] = {}
    for p in parts:
        for tag, series in p.items():
            merged.setdefault(tag, series)
    return merged


def run_scalars(reader: Any) -> dict[str, Any]:
    """Refresh a ``lab.events.LogdirReader`` over one run folder and return its scalars as one run.

    Incremental: the refresh reads only what was written since the last one.
    A trainer run by hand writing straight into the folder (run ``.``) counts
    like ``tb/``.
    """
    reader.refresh()
    return _read(reader)


def _read(reader: Any) -> dict[str, Any]:
    """A refreshed reader's scalars as one run."""
    return merge_parts(reader.scalars(n) for n in sorted(reader.run_names()))


def folder_scalars(folders: Iterable[str], reader_for: Callable[[str], Any]) -> dict[str, Any]:
    """The scalars of several folders as one run, each read by ``reader_for(folder)`` (the first
    folder wins a clash).

    ``reader_for`` gives a ``lab.events.LogdirReader`` per folder: the pages'
    cached ``ui.shared.event_reader`` (incremental across reruns), or
    ``LogdirReader`` itself for a one-off read.
    """
    return merge_parts(run_scalars(reader_for(str(f))) for f in folders)


def many_folder_scalars(
    runs: Mapping[str, Iterable[str]], reader_for: Callable[[str], Any]
) -> dict[str, dict[str, Any]]:
    """``folder_scalars`` of many runs (key -> its folders) at once: every folder's reader
    refreshed in one batch (``lab.events.refresh_all``: a thousand runs' small files framed
    together, not one run at a time), then each run's folders merged as ``folder_scalars``
    merges them."""
    readers = {k: [reader_for(str(f)) for f in folders] for k, folders in runs.items()}
    refresh_all([r for rs in readers.values() for r in rs])
    return {k: merge_parts(_read(r) for r in rs) for k, rs in readers.items()}


def split_sys(scalars: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(training scalars, device samples)``: the ``sys/`` tags apart from all others."""
    train = {t: s for t, s in scalars.items() if not t.startswith(SYS_PREFIX)}
    return train, {t: s for t, s in scalars.items() if t.startswith(SYS_PREFIX)}
