"""Profiling a window of optimizer steps (``--profile-steps A:B``) and CUDA memory history
(``--memory-snapshot N``).

Owns when ``torch.profiler`` runs and what it leaves in ``profile/`` of the
run folder (docs/contracts.md section 2). The window is steps A to B-1, like
a Python slice. Outside it nothing of the profiler exists: ``step()`` and
``phase()`` hand back one shared ``nullcontext``, so an unprofiled step pays a
few method calls (bench/profile_overhead.py measures it). Inside it every rank
records CPU activity (and CUDA where the run is on a GPU), each step in a
``ProfilerStep#<step>`` range and the loop's phases in ``data``, ``forward``,
``backward`` and ``optimizer`` ranges; on CUDA each phase ends with a device
synchronize so its range covers its kernels. After step B-1 every rank writes
``trace_rank<i>.json.gz`` and rank 0 gathers every rank's figures
(``training.breakdown``) into ``breakdown.json``; that time counts as paused,
not as step time. ``--memory-snapshot N`` records the CUDA caching allocator's
history over this run's first N steps into ``memory_snapshot_rank<i>.pickle``
(pytorch.org/memory_viz reads it); on the CPU it is refused before the run.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, ContextManager, Iterator

import torch
from torch.profiler import ProfilerActivity, record_function

from training import breakdown
from training.cli import BadInput, parse_window
from training.distributed import Placement, gather_objects
from training.metrics import write_json_atomic

log = logging.getLogger(__name__)
NULL: ContextManager[None] = nullcontext()
MEMORY_ENTRIES = 100_000  # alloc/free events kept; the pickle grows with it (several KB each)


def check_memory_snapshot(steps: int, placement: Placement) -> None:
    """Refuse ``--memory-snapshot`` where there is no CUDA allocator to record."""
    if steps and placement.device.type != "cuda":
        raise BadInput(
            "--memory-snapshot records CUDA memory and this run is on the CPU: "
            "drop it, or use --device cuda on a machine with a GPU"
        )


def fallback_note(placement: Placement) -> str | None:
    """Why a breakdown has no DataParallel phases although ``--mode dp`` was asked for."""
    if placement.mode == "dp" and placement.effective_mode != "dp":
        return (
            f"DataParallel fell back to one device ({placement.effective_mode_reason}): "
            "no scatter/replicate/gather"
        )
    return None


class StepProfiler:
    """The profiler of one run: idle outside its window, every rank's trace and rank 0's breakdown
    after it."""

    def __init__(
        self, args: Any, placement: Placement, run_dir: Path, first_step: int, last_step: int
    ) -> None:
        self.p, self.dir = placement, run_dir / "profile"
        self.window = parse_window(args.profile_steps)
        if self.window is not None:
            a, b = self.window
            if b - 1 > last_step:
                raise BadInput(
                    f"--profile-steps {a}:{b} reaches past the run's last step ({last_step}): "
                    f"end it at {last_step + 1} or less, or train for more steps"
                )
            if a <= first_step:
                raise BadInput(
                    f"--profile-steps {a}:{b} starts at or before step {first_step}, where this "
                    "run "
                    f"resumes: start it at {first_step + 1} or later"
                )
        self.memory_last = first_step + args.memory_snapshot if args.memory_snapshot else 0
        self.cuda = placement.device.type == "cuda"
        self._prof: Any = None  # torch.profiler.profile, only from step A to the write after B-1
        self._recording_memory = False
        self.written: dict[str, Any] = {}  # what summary.json's "profile" lists

    # -- in the loop -----------------------------------------------------
    def begin(self) -> None:
        """At the start of the run: CUDA memory history, when asked for."""
        if self.memory_last:
            torch.cuda.memory._record_memory_history(max_entries=MEMORY_ENTRIES)
            self._recording_memory = True

    def step(self, k: int) -> ContextManager[None]:
        """Around optimizer step ``k`` (1-based): a ``ProfilerStep#k`` range inside the window,
        nothing outside."""
        if self.window is not None and self.window[0] <= k < self.window[1]:
            return self._profiled_step(k)
        return NULL

    def phase(self, name: str) -> ContextManager[None]:
        """Around one of the loop's phases (data, forward, backward, optimizer) of a step."""
        if self._prof is None:
            return NULL
        return self._cuda_range(name) if self.cuda else record_function(name)

    def due(self, k: int) -> bool:
        """Has step ``k`` ended the window or the memory history, so that ``write()`` must run
        now?"""
        return (self.window is not None and k == self.window[1] - 1) or (
            self._recording_memory and k >= self.memory_last
        )

    def write(self) -> None:
        """Trace and breakdown after the window (a collective in DDP: every rank calls it); the
        memory snapshot."""
        if self._prof is not None:
            prof, self._prof = self._prof, None
            prof.stop()
            self._write_profile(prof)
        if self._recording_memory:
            self._dump_memory()

    def close(self) -> None:
        """At the end of the run: drop a window a stop cut short; dump memory history of a short
        run."""
        if self._prof is not None:
            self._prof.stop()
            self._prof = None
            log.warning(
                "the run stopped inside --profile-steps %d:%d: no profile written", *self.window
            )
        if self._recording_memory:
            self._dump_memory()

    # -- inside ----------------------------------------------------------
    @contextmanager
    def _profiled_step(self, k: int) -> Iterator[None]:
        if self._prof is None:
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
            self._prof = torch.profiler.profile(activities=activities, record_shapes=True)
            self._prof.start()
        with record_function(f"{breakdown.STEP_PREFIX}{k}"):
            yield
            self._sync()

    @contextmanager
    def _cuda_range(self, name: str) -> Iterator[None]:
        with record_function(name):
            yield
            self._sync()

    def _sync(self) -> None:
        if self.cuda:
            for i in self.p.device_ids or [self.p.device.index or 0]:
                torch.cuda.synchronize(i)

    def _write_profile(self, prof: Any) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        trace, mine = self._export(prof), None
        try:
            mine = (
                breakdown.rank_figures(trace, self.p.rank, self.p.world_size)
                if trace is not None
                else None
            )
        # a trace layout we do not know must not stop training
        except (KeyError, TypeError, ValueError) as e:
            log.warning("--profile-steps: rank %d could not read its trace (%r)", self.p.rank, e)
        # every rank gets here, so a rank without figures cannot hang the others
        parts = gather_objects(mine)
        ranks = [part for part in parts if part is not None]
        if not ranks:
            log.warning("--profile-steps: no rank has a usable trace; no breakdown written")
            return
        if self.p.is_main:
            data = breakdown.combine(
                self.window,
                ranks,
                device=self.p.device.type,
                effective_mode=self.p.effective_mode,
                world_size=self.p.world_size,
                note=fallback_note(self.p),
            )
            write_json_atomic(self.dir / "breakdown.json", data)
            log.info(
                "profile of steps %d-%d: %.1f ms a step, written to %s",
                self.window[0],
                self.window[1] - 1,
                data["step_ms"],
                self.dir,
            )
        self.written["breakdown"] = "profile/breakdown.json"

    def _export(self, prof: Any) -> dict[str, Any] | None:
        """This rank's Chrome trace, gzipped into profile/, and parsed for the breakdown."""
        final = self.dir / f"trace_rank{self.p.rank}.json.gz"
        raw_path = self.dir / f".trace_rank{self.p.rank}.{os.getpid()}.json"
        part = final.with_name(f".{final.name}.{os.getpid()}.tmp")
        try:
            prof.export_chrome_trace(str(raw_path))
            if hasattr(prof, "wait_for_exports"):  # some torch builds export asynchronously
                prof.wait_for_exports()
            raw = raw_path.read_bytes()
            with gzip.open(part, "wb", compresslevel=6) as f:
                f.write(raw)
            os.replace(part, final)
            return json.loads(raw)
        except (OSError, ValueError) as e:
            log.warning("--profile-steps: rank %d could not write its trace (%s)", self.p.rank, e)
            return None
        finally:
            raw_path.unlink(missing_ok=True)
            part.unlink(missing_ok=True)

    def _dump_memory(self) -> None:
        self._recording_memory = False
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"memory_snapshot_rank{self.p.rank}.pickle"
        torch.cuda.memory._dump_snapshot(str(path))
        torch.cuda.memory._record_memory_history(enabled=None)
        self.written["memory_snapshots"] = [
            f"profile/memory_snapshot_rank{r}.pickle" for r in range(self.p.world_size)
        ]
        log.info("CUDA memory history written to %s (open it at pytorch.org/memory_viz)", path)
