"""The supervisor's health watch: observe a running run, keep status.json's ``health``, save stacks,
mark events.

``HealthWatch.tick`` is called by the supervisor every sample interval with
the run's process tree and the device values it just sampled. It reads what
the run wrote (progress.json, the event files of its curves: ``tb/`` or a
script's linked folders, incrementally through ``lab.events``), turns it into a
``lab.engine.health.rules.Observation`` and asks ``health.findings``. A finding made
for the first time becomes a ``health/<key>`` = 1 event at the optimizer step
it was found, in ``RUN_DIR/health/`` (its own folder: the supervisor's
``sys/`` counts samples, not steps, and TensorBoard drops points whose step
goes back within one folder). A stalled run gets every rank's stack
(``lab.engine.health.stacks``) and the device strip of that moment in its evidence,
again while it stays stalled (up to ``MAX_STALL_DUMPS``, each wait twice the one before,
``dump_wait_s``), so a start-up that was slow and then hung is caught in the act. A
``stacks.request`` file asks for the stacks now. The torchrun restarts seen
in the log (``lab.engine.health.restarts``) are kept as status.json's ``restarts``.
It never raises into the supervisor: a failing check is logged and skipped.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from lab import tags
from lab.engine.health import restarts, stacks
from lab.engine.health import rules as health
from lab.engine.health.memory import RunMemory
from lab.engine.health.rules import Finding, Observation
from lab.engine.spec import modes
from lab.events.reader import file_origin
from lab.runfolder import HEALTH_DIR, STACKS_REQUEST, TB_DIR, TRAINER, stamp
from lab.runrecords import read_progress

log = logging.getLogger(__name__)
NO_LOCAL_PROCESS = (
    "none of the run's processes is on this machine (a Slurm job on other nodes): no stacks from "
    "here; py-spy dump --pid on the node shows them"
)
MAX_STALL_DUMPS = 5  # stacks saved per stalled spell: 1, 2, 4 and 8 thresholds apart
READ_EVERY_S = 2.0  # event files and the log are read at most this often
_TAGS = (
    tags.TRAIN_LOSS,
    tags.TRAIN_ACC,
    tags.VAL_ACC,
    tags.STEP_TIME_MS,
    tags.DATA_TIME_MS,
    tags.GRAD_NORM_WARNING,
)


def _points(series: Any) -> list[tuple[int, float]]:
    return [(int(s), float(v)) for s, v in zip(np.asarray(series.step), np.asarray(series.value))]


def _gaps(series: Any) -> list[float]:
    walls = np.asarray(series.wall_time, dtype=float)
    return [float(x) for x in np.diff(walls) if x > 0]


def _busiest(scalars: dict[str, Any]) -> Any:
    return max(scalars.values(), key=len) if scalars else None


def writers(folders: dict[str, set[str]], since: float) -> dict[str, Any]:
    """Several processes writing the same curves: ``{"folders": {folder: [pids]}}`` where two or
    more pids wrote event files (since the launch) into one folder, whose points then merge into
    one curve, and ``{"shared": [tag, ...]}`` for tags logged in more than one folder (each rank
    its own writer); {} when neither."""
    crowded: dict[str, list[int]] = {}
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        pids = set()
        for n in names:
            created, pid = file_origin(n)
            if "tfevents" in n and pid is not None and (created or 0) >= int(since) - 1:
                pids.add(pid)
        if len(pids) > 1:
            crowded[folder] = sorted(pids)
    seen: dict[str, int] = {}
    for tags_of in folders.values():
        for t in tags_of:
            seen[t] = seen.get(t, 0) + 1
    shared = sorted(t for t, n in seen.items() if n > 1)
    return {k: v for k, v in (("folders", crowded), ("shared", shared)) if v}


def dump_wait_s(threshold_s: float, dumps_taken: int) -> float:
    """Seconds from a stalled spell's ``dumps_taken``-th stack dump to the next: the threshold, then
    twice the wait before. Before the first step a run counts as idle from its launch, so ranks that
    start slowly (importing torch on a busy machine) and then hang are still starting at the first
    dumps; doubling keeps the 5 dumps' disk bounded and reaches 15 thresholds past the first (15
    minutes at the default 60 s), where dumps one threshold apart stopped at 4."""
    return threshold_s * 2 ** max(dumps_taken - 1, 0)


class HealthWatch:
    """One run's health, kept in status.json through ``update`` (the supervisor's
    ``Status.update``)."""

    def __init__(
        self, run_dir: Path, run: dict, update: Callable[..., None], before: Any = None
    ) -> None:
        self.run_dir, self.run, self.update = Path(run_dir), run, update
        self.config = run.get("config") or {}
        self.kind = str(run.get("kind") or TRAINER)
        self.torchrun = modes.torchrun(self.config.get("mode"))
        self.found: list[Finding] = health.from_dicts(before)
        self.started = time.time()
        self._readers: dict[str, Any] = {}
        self._scalars: dict[str, Any] = {}
        self._read_at = 0.0
        self._stall_dumps, self._next_dump = 0, 0.0
        self._writer: Any = None
        self._restarts: list[dict] = []
        self._script_step = 0
        self._alive = True
        self._writers: dict[str, Any] = {}
        self._log_at = 0.0
        self.memory = RunMemory(self.run_dir)

    # -- reading ------------------------------------------------------------
    def _read(self, dirs: list[str]) -> None:
        from lab.events import LogdirReader  # here: only a watched run pays for it

        wanted = [str(self.run_dir / TB_DIR)] if self.kind == TRAINER else list(dirs)
        merged: dict[str, Any] = {}
        folders: dict[str, set[str]] = {}  # each folder of event files: its tags
        for d in wanted:
            reader = self._readers.setdefault(d, LogdirReader(d))
            reader.refresh()
            for name in sorted(reader.run_names()):
                scalars = reader.scalars(name)
                folders[os.path.normpath(os.path.join(d, name))] = set(scalars)
                for tag, s in scalars.items():
                    merged.setdefault(tag, s)
        self._scalars = merged
        self.memory.read_nodes()
        if self.kind != TRAINER:  # the trainer writes from rank 0 only
            self._writers = writers(folders, self.started)

    def observe(self, alive: bool, dirs: list[str]) -> Observation:
        """What the run shows now; the event files are re-read at most every ``READ_EVERY_S``."""
        now = time.time()
        if now - self._read_at >= READ_EVERY_S:
            self._read_at = now
            self._read(dirs)
        sc, prog = self._scalars, read_progress(self.run_dir) or {}
        walls = [float(np.asarray(s.wall_time)[-1]) for s in sc.values() if len(s)]
        updated = (
            prog.get("updated_at") if isinstance(prog.get("updated_at"), (int, float)) else None
        )
        last = max([w for w in walls] + ([updated] if updated else []), default=None)
        trainer = self.kind == TRAINER
        main = sc.get(tags.TRAIN_LOSS) if trainer else _busiest(sc)
        steps = (
            [v / 1000 for _, v in _points(sc[tags.STEP_TIME_MS])] if tags.STEP_TIME_MS in sc else []
        )
        # a script: seconds per step between its points
        if not steps and main is not None and len(main) > 1:
            d_step, d_wall = (
                np.diff(np.asarray(main.step, dtype=float)),
                np.diff(np.asarray(main.wall_time)),
            )
            steps = [float(w / s) for s, w in zip(d_step, d_wall) if s > 0]
        last_of = {
            t: _points(sc[t])[-1][1]
            for t in (tags.DATA_TIME_MS, tags.STEP_TIME_MS)
            if t in sc and len(sc[t])
        }
        step = int(
            prog.get("step")
            or (int(np.asarray(main.step)[-1]) if main is not None and len(main) else 0)
        )
        return Observation(
            now=now,
            started=self.started,
            alive=alive,
            last_activity=last,
            step=step,
            step_times_s=steps,
            update_gaps_s=_gaps(main) if main is not None else [],
            loss=_points(sc[tags.TRAIN_LOSS]) if tags.TRAIN_LOSS in sc else [],
            acc=_points(sc.get(tags.VAL_ACC) or sc[tags.TRAIN_ACC])
            if (tags.VAL_ACC in sc or tags.TRAIN_ACC in sc)
            else [],
            data_ms=last_of.get(tags.DATA_TIME_MS),
            step_ms=last_of.get(tags.STEP_TIME_MS),
            num_classes=prog.get("num_classes"),
            writers=self._writers,
            steps_per_epoch=prog.get("steps_per_epoch"),
            grad_warnings=_points(sc[tags.GRAD_NORM_WARNING])
            if tags.GRAD_NORM_WARNING in sc
            else [],
            grad_limit=float(self.config.get("grad_norm_warn") or 0.0),
            workers=self.config.get("workers") if trainer else None,
            pin_memory=bool(self.config.get("gpus")) if trainer else None,
            stall_after=float(self.config.get("stall_after") or 0.0),
            memory=self.memory.series(self._scalars),
            compiling=trainer and self.config.get("compile") == "on",
        )

    # -- acting ---------------------------------------------------------------
    def tick(
        self,
        pid: int,
        tree: list,
        values: dict[str, float],
        dirs: list[str],
        alive: bool | None = None,
    ) -> None:
        """One look at the running run (alive: ``tree`` is not empty, unless ``alive`` says, as for
        a Slurm job on other nodes); never raises."""
        try:
            self._alive = bool(tree) if alive is None else alive
            self._tick(pid, tree, values, dirs)
        except Exception as e:  # a health bug must never take the run or its supervisor down
            log.warning("health check failed: %s", e, exc_info=True)

    def _tick(self, pid: int, tree: list, values: dict[str, float], dirs: list[str]) -> None:
        request = self.run_dir / STACKS_REQUEST
        if request.exists():
            request.unlink(missing_ok=True)
            self.update(stacks=self.dump(pid, tree).to_dict())
        self.memory.note(values)
        obs = self.observe(self._alive, dirs)
        self._note_script_step(obs.step)
        found = health.findings(obs, self.found)
        stalled = next((f for f in found if f.key == "stalled"), None)
        if stalled is None:
            self._stall_dumps = 0
        elif self._stall_dumps < MAX_STALL_DUMPS and time.monotonic() >= self._next_dump:
            self._stall_dumps += 1
            threshold = stalled.evidence.get("threshold_s", 60.0)
            self._next_dump = time.monotonic() + dump_wait_s(threshold, self._stall_dumps)
            d = self.dump(pid, tree)
            ev = dict(
                stalled.evidence,
                stacks=d.files,
                stack_notes=d.notes,
                stacks_at=d.at,
                devices=devices(values),
            )
            found = [
                Finding(f.key, f.message, f.fix, f.since, ev, f.step) if f is stalled else f
                for f in found
            ]
        self._record(found)
        if time.monotonic() >= self._log_at:
            self._log_at = time.monotonic() + READ_EVERY_S * 2.5
            self._note_restarts()

    def dump(self, pid: int, tree: list) -> stacks.Dump:
        if not pid:  # a Slurm job whose processes are all on other nodes
            return stacks.Dump(at=stamp(), notes=[NO_LOCAL_PROCESS])
        d = stacks.take(self.run_dir, self.kind, self.torchrun, pid, tree)
        log.info(
            "stacks saved: %s%s",
            ", ".join(d.files) or "none",
            f" ({'; '.join(d.notes)})" if d.notes else "",
        )
        return d

    def _record(self, found: list[Finding]) -> None:
        new = [f for f in found if f.key not in {g.key for g in self.found}]
        if [f.to_dict() for f in found] != [f.to_dict() for f in self.found]:
            self.update(health=[f.to_dict() for f in found])
        self.found = found
        for f in new:
            log.warning("health: %s: %s", f.key, f.message)
            self._event(tags.health(f.key), f.step)

    def _event(self, tag: str, step: int) -> None:
        # tensorboard's writer; imported once a finding is made
        from lab.engine.scalars import ScalarWriter

        if self._writer is None:
            self._writer = ScalarWriter(self.run_dir / HEALTH_DIR)
        self._writer.add({tag: 1.0}, step, time.time())
        self._writer.flush()

    def _note_script_step(self, step: int) -> None:
        """A script writes no progress.json: its newest event step is status.json's
        ``script_step``, so `lab status` shows how far it is (the trainer's is progress.json)."""
        if self.kind != TRAINER and step and step != self._script_step:
            self._script_step = step
            self.update(script_step=step)

    def _note_restarts(self) -> None:
        seen = restarts.restarts(self.run_dir) if self.torchrun else []
        if seen != self._restarts:
            self._restarts = seen
            self.update(restarts=seen)

    def finish(self, dirs: list[str]) -> None:
        """The last look, after the processes ended: what they left (a NaN loss) is found too; never
        raises."""
        try:
            self._read_at = 0.0
            obs = self.observe(False, dirs)
            self._note_script_step(obs.step)
            found = health.findings(obs, self.found)
            # a run stopped or failed while stalled keeps that finding (and its stacks): it says why
            found += [
                f for f in self.found if f.key == "stalled" and f.key not in {g.key for g in found}
            ]
            self._record(found)
            self._note_restarts()
        except Exception as e:
            log.warning("final health check failed: %s", e, exc_info=True)
        if self._writer is not None:
            self._writer.close()

    def diagnosis(self) -> tuple[str, str] | None:
        """(cause, fix) of a finding that explains a failure (``nan_loss``), for a log that names
        nothing better."""
        f = next((f for f in self.found if f.key == "nan_loss"), None)
        return None if f is None else (f.message, f.fix)


def devices(values: dict[str, float]) -> list[dict[str, Any]]:
    """The device strip of one sample: util and memory per GPU, or the run's CPU and RSS."""
    gpus = sorted(
        {
            int(t.split("/")[1][3:])
            for t in values
            if t.startswith(tags.SYS_GPU) and t.count("/") == 2
        }
    )
    if gpus:
        return [
            {
                "gpu": g,
                "util_pct": values.get(tags.sys_gpu(g, "util_pct")),
                "mem_used_mib": values.get(tags.sys_gpu(g, "mem_used_mib")),
            }
            for g in gpus
        ]
    if tags.SYS_CPU_PCT in values:
        return [{"cpu_pct": values.get(tags.SYS_CPU_PCT), "rss_mib": values.get(tags.SYS_RSS_MIB)}]
    return []
