"""Big cold runs read in worker processes: the cores used where one process would decode alone.

Owns when and how a refresh hands runs to other processes. A run no reader has read yet, whose
files are all too big for the small-file batch (``lab.events.many``) and have no cache entry, is
read from its first byte: framing, CRC checks and decoding of tens of MB, on one core (that path
holds the GIL: threads measured slower). With two such runs or more, each is read by a worker
process (at most one per core), which writes the run's cache entries (``lab.events.cache``) and
exits; the refresh then restores those runs from their entries, as a second visit would. The
result is the reader's own: the entries are what it would have written, and a run whose entries
are missing (a worker failed, the cache cannot be written) is read in process as before.

Workers are forked: no interpreter start, nothing imported again, so two runs are worth it. A
fork is safe only in a process that runs one thread (a script, ``python -m lab scalars``, the
benches); in one with other threads, such as the dashboard's server, a child can inherit a lock
held forever, so there the runs are read in process. ``LAB_EVENTS_APART=0`` turns it off.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Callable

log = logging.getLogger(__name__)

# Each worker holds one run's bytes and columns at a time: a bound on memory as on processes.
MAX_WORKERS = 16


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # what this process may use, not what the box has
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def workers(cold_runs: int) -> int:
    """Worker processes for ``cold_runs`` runs to read; 0: read them in this process."""
    if os.environ.get("LAB_EVENTS_APART", "1").strip().lower() in ("0", "false", "no", "off"):
        return 0
    if cold_runs < 2 or threading.active_count() > 1:
        return 0
    n = min(cold_runs, _cores(), MAX_WORKERS)
    return n if n > 1 else 0


def run_apart(fn: Callable[..., object], jobs: list[tuple], n: int) -> int:
    """``fn(*job)`` for every job in ``n`` forked processes; how many returned without error.

    A failure is logged and leaves its job undone: the caller reads what is missing itself.
    """
    # Imported here: ~30 ms that a warm reader, which never forks, should not pay at start-up.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    done = 0
    try:
        with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork")) as pool:
            futures = [pool.submit(fn, *job) for job in jobs]
            for job, fut in zip(jobs, futures):
                try:
                    fut.result()
                    done += 1
                except BrokenProcessPool:
                    raise
                except Exception:
                    log.exception("reading %s in a worker process", job[0])
    except (OSError, BrokenProcessPool) as exc:  # no fork, a worker killed: read in process
        log.info("event reading in worker processes failed (%s); reading in process", exc)
    return done
