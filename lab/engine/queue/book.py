"""The queue's state, ``<runs>/.queue/queue.json``, and the rule for who may start.

An entry is one run, or one whole sweep (its runs one after another): its ``id``, the
``devices`` it needs (``gpu<i>``, or ``cpu``), ``exclusive``, the supervisor that waits for it
(``pid``, ``ct``) and ``state`` (``waiting`` or ``running``), in arrival order. An entry may start
when no running entry and no entry ahead of it conflicts with it (first come, first served among
conflicts, so an exclusive run is never starved); two entries conflict when either is exclusive or
they share a GPU. Entries whose supervisor is gone are dropped on every read, so a dead watcher
never blocks the queue. The file is written atomically, under ``lock.locked``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from lab.engine import procs
from lab.engine.queue.lock import locked
from lab.runfolder import RUN_JSON, read_json, write_json_atomic
from lab.runrecords import read_run, read_status

QUEUE_DIR = ".queue"  # in the runs root
QUEUE_JSON = "queue.json"
LOCK = "lock"
WAITING, RUNNING = "waiting", "running"
CPU = "cpu"


def queue_dir(root: Path) -> Path:
    return Path(root) / QUEUE_DIR


def devices_of(gpus: list[int] | tuple[int, ...]) -> list[str]:
    """The queue's names for a run's devices: ``gpu<i>`` per physical index, ``cpu`` for none."""
    return [f"gpu{int(g)}" for g in gpus] or [CPU]


def conflict(a: dict, b: dict) -> bool:
    """Two entries may not run side by side: either is exclusive, or they share a GPU."""
    if a.get("exclusive") or b.get("exclusive"):
        return True
    return bool((set(a["devices"]) & set(b["devices"])) - {CPU})


def _alive(root: Path, e: dict) -> bool:
    """Its supervisor runs, or (a running entry whose supervisor was killed) its run's command
    still does: the devices are not free until that ends."""
    if procs.alive(e.get("pid"), e.get("ct")):
        return True
    if e.get("state") != RUNNING:
        return False
    sts = [read_status(Path(root) / r) for r in e.get("runs") or []]
    return any(procs.alive(st.pid, st.pid_ct) for st in sts if st.pid)


def read(root: Path) -> list[dict]:
    """The live entries, in order (entries of dead supervisors left out)."""
    data = read_json(queue_dir(root) / QUEUE_JSON) or {}
    return [e for e in data.get("entries") or [] if _alive(root, e)]


@contextmanager
def editing(root: Path) -> Iterator[list[dict]]:
    """The live entries under the lock, written back atomically when the block ends."""
    with locked(queue_dir(root) / LOCK):
        entries = read(root)
        yield entries
        write_json_atomic(queue_dir(root) / QUEUE_JSON, {"entries": entries})


def blockers(entries: list[dict], entry_id: str) -> list[dict]:
    """The entries that keep ``entry_id`` waiting: running ones and ones ahead that conflict."""
    me_at = next(i for i, e in enumerate(entries) if e["id"] == entry_id)
    me = entries[me_at]
    return [
        e
        for i, e in enumerate(entries)
        if i != me_at and (e["state"] == RUNNING or i < me_at) and conflict(me, e)
    ]


def position(entries: list[dict], entry_id: str) -> int:
    """1 for the first waiting entry, 2 for the next, ..."""
    waiting = [e["id"] for e in entries if e["state"] == WAITING]
    return waiting.index(entry_id) + 1 if entry_id in waiting else 0


def move_first(root: Path, run_id: str, find: Callable[[dict], bool] | None = None) -> bool:
    """Move the waiting entry of ``run_id`` (or its sweep) ahead of every waiting entry; return
    False when ``run_id`` is not waiting."""
    with editing(root) as entries:
        match = find or (lambda e: e["id"] == run_id or run_id in e.get("runs", []))
        mine = [e for e in entries if e["state"] == WAITING and match(e)]
        if not mine:
            return False
        entries[:] = (
            [e for e in entries if e["state"] == RUNNING]
            + mine
            + [e for e in entries if e["state"] == WAITING and e not in mine]
        )
    return True


def ask_exclusive(run_dir: Path) -> None:
    """Record in a new run's run.json (before its supervisor starts) that it asked for the machine
    to itself (``--exclusive``): the queue starts it alone."""
    run = read_run(run_dir).data
    write_json_atomic(Path(run_dir) / RUN_JSON, dict(run, exclusive=True))


def ask_idle(run_dir: Path) -> None:
    """Record in a new run's run.json that it waits for foreign work to end too
    (``--wait-for-idle``, ``lab.engine.queue.idle``)."""
    run = read_run(run_dir).data
    write_json_atomic(Path(run_dir) / RUN_JSON, dict(run, wait_for_idle=True))


def listing(root: Path) -> list[dict]:
    """The queue as shown (``lab queue``, Home): each live entry with its ``position`` (0 when
    running) and ``waiting_for`` (the ids of the entries it waits for)."""
    entries = read(root)
    return [
        dict(
            e,
            position=position(entries, e["id"]),
            waiting_for=[b["id"] for b in blockers(entries, e["id"])]
            if e["state"] == WAITING
            else [],
        )
        for e in entries
    ]
