"""What the trainer writes into the run folder, the figures behind it, and the memory it reports.

Owns the rank-0 outputs of docs/contracts.md section 2: TensorBoard scalars
under ``tb/`` (through ``torch.utils.tensorboard.SummaryWriter``),
``progress.json`` every log window and ``summary.json`` at the end, both
written atomically (temp file in the same folder, then ``os.replace``) so a reader never sees half
a file; a full disk raises ``training.diskfull.DiskFull``. Also owns per-device memory in MiB: CUDA
from
the caching allocator, CPU from the process's resident set (allocated =
reserved = current RSS, peak = peak RSS), gathered from every rank in DDP
without one rank's names overwriting another's (``merge_memory``), and the
gradient watch (``GradWatch``: steps GradScaler skipped, the grad-norm warning).
Also owns a logging window's running sums (``Window``, torchvision's
``MetricLogger`` cut down to what we log) and spans of step time that leave
out validation and checkpoints (``Span``). The recorder keeps every logging
window's ``perf/samples_per_sec`` (``rate_windows``), and under ``--compile on`` the windows
during which a graph compiled (``compile_windows``), for summary.json's
``throughput`` (``training.throughput``). Nothing here creates a file until
the first write, so a refused run leaves the run folder untouched.
"""

from __future__ import annotations

import json
import logging
import math
import os
import resource
import struct
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import psutil
import torch

from training.diskfull import writing
from training.distributed import Placement, gather_objects

log = logging.getLogger(__name__)
MIB = 2**20
FLUSH_EVERY_S = 2.0  # event-file flushes at most this often: a flush waits for the writer thread
RATE_TAG = "perf/samples_per_sec"


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, default=str)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def local_memory_mib(placement: Placement) -> dict[str, dict[str, float]]:
    """This process's devices: ``{name: {allocated, peak, reserved, peak_reserved}}`` in MiB
    (``peak_reserved``: ``torch.cuda.max_memory_reserved``, what the caching allocator held at
    most, which is what runs out; on the CPU the peak resident set, as ``peak``)."""
    out: dict[str, dict[str, float]] = {}
    if placement.device.type == "cuda":
        for name, i in zip(
            placement.device_names, placement.device_ids or [placement.device.index or 0]
        ):
            out[name] = {
                "allocated": torch.cuda.memory_allocated(i) / MIB,
                "peak": torch.cuda.max_memory_allocated(i) / MIB,
                "reserved": torch.cuda.memory_reserved(i) / MIB,
                "peak_reserved": torch.cuda.max_memory_reserved(i) / MIB,
            }
    else:
        rss = psutil.Process().memory_info().rss / MIB
        hwm = proc_status_kib("VmHWM")  # Linux: the peak, reset where training.memory resets it
        if hwm is not None:
            peak = hwm / 1024
        else:  # elsewhere the lifetime peak (Linux reports KiB)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MIB
        top = max(peak, rss)
        out[placement.device_names[0]] = {
            "allocated": rss,
            "peak": top,
            "reserved": rss,
            "peak_reserved": top,
        }
    return out


def proc_status_kib(field: str) -> float | None:
    """A ``kB`` field of ``/proc/self/status`` (e.g. ``VmHWM``), or None where there is none."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def merge_memory(parts: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Every rank's devices (``parts`` in rank order) in one dict; a name two ranks share is kept
    for both as ``rank<r>:<name>``, never overwritten (device names are unique per node and node
    prefixed)."""
    merged: dict[str, dict[str, float]] = {}
    for rank, part in enumerate(parts):
        for name, mem in part.items():
            merged[f"rank{rank}:{name}" if name in merged else name] = mem
    return merged


def gathered_memory_mib(placement: Placement) -> dict[str, dict[str, float]]:
    """Memory of every device of the run; a collective in DDP, so every rank must call it."""
    return merge_memory(gather_objects(local_memory_mib(placement)))


class GradWatch:
    """Gradient norms: the steps GradScaler skipped, and the ``--grad-norm-warn`` warning.

    GradScaler skips a step exactly when a gradient holds inf or NaN, which is
    when their total norm is not finite; fp16's first steps do so while the
    scale settles. Those are counted (on the device, no sync per step) and
    never warned about; any finite norm above the limit is. Without a scaler
    a non-finite norm is a real divergence and is warned about too.
    """

    def __init__(self, device: torch.device, scaler_on: bool, limit: float) -> None:
        self.scaler_on, self.limit = scaler_on, limit
        self.skipped = torch.zeros((), dtype=torch.int64, device=device)

    def step(self, norm: torch.Tensor | None) -> None:
        if self.scaler_on and norm is not None:
            self.skipped += (~torch.isfinite(norm)).long()

    def warning(self, norm: float) -> bool:
        """Whether this step's norm is worth a warning."""
        if not math.isfinite(norm):
            return not self.scaler_on
        return norm > self.limit

    def check(self, norm: float, step: int, is_main: bool, recorder: "Recorder") -> None:
        """Warn (rank 0's log, ``train/grad_norm_warning``) when ``warning(norm)``."""
        if self.warning(norm):
            if is_main:
                log.warning(
                    "step %d: gradient norm %.4g is above --grad-norm-warn %.4g",
                    step,
                    norm,
                    self.limit,
                )
            recorder.scalars({"train/grad_norm_warning": norm}, step)

    def skipped_steps(self) -> int | None:
        """Steps skipped so far by this process (None without a GradScaler). Syncs with the
        device."""
        return int(self.skipped) if self.scaler_on else None


class Span:
    """Seconds since it was made, less the time the loop spent paused (validation, checkpoints)
    since."""

    def __init__(self, paused_s: float) -> None:
        self.t0, self.paused_at = time.perf_counter(), paused_s

    def seconds(self, paused_s: float) -> float:
        return time.perf_counter() - self.t0 - (paused_s - self.paused_at)


class Window:
    """One logging window: loss and accuracy sums kept on the device (no ``.item()`` per step),
    steps, data time."""

    def __init__(self, device: torch.device, paused_s: float) -> None:
        self.device = device
        self.restart(paused_s)

    def restart(self, paused_s: float) -> None:
        """Empty sums, and the window's clock starts now."""
        self.loss_sum = torch.zeros((), device=self.device)
        self.correct = torch.zeros((), device=self.device)
        self.n, self.steps, self.data_s = 0, 0, 0.0
        self.span = Span(paused_s)

    def update(self, loss: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor) -> None:
        n = labels.shape[0]
        self.loss_sum += loss.detach().float() * n
        self.correct += (logits.detach().argmax(1) == labels).sum()
        self.n += n
        self.steps += 1

    def totals(self) -> torch.Tensor:
        """``[loss sum, correct, samples]`` of this rank, ready for ``reduce_across_processes``."""
        return torch.stack(
            [
                self.loss_sum.float(),
                self.correct.float(),
                torch.tensor(float(self.n), device=self.device),
            ]
        )


class Recorder:
    """Rank 0's writer of events, progress and summary; every method is a no-op elsewhere."""

    def __init__(self, log_dir: Path, enabled: bool) -> None:
        self.log_dir, self.enabled = log_dir, enabled
        self._writer = None
        self._flushed_at = 0.0
        # (step, samples/s) of every logging window, as float32 like the events hold them, so that
        # summary.json's throughput equals what a reader derives from the events
        self.rate_windows: list[tuple[int, float]] = []
        # --compile on: the step closing each logging window during which dynamo compiled a graph
        # (``watch_graphs``); summary.json's throughput leaves those windows out
        self.compile_windows: list[int] = []
        self._graphs: Callable[[], int] | None = None
        self._graphs_seen = 0

    def _w(self):
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter  # imports tensorboard: rank 0 only

            with writing(self.log_dir / "tb"):
                self._writer = SummaryWriter(log_dir=str(self.log_dir / "tb"), flush_secs=10)
        return self._writer

    def watch_graphs(self, count: Callable[[], int]) -> None:
        """Note, at every logging window, whether ``count`` (dynamo's compiled graphs so far) rose
        since the last: ``compile_windows`` (``training.compiling.Watch`` calls it)."""
        self._graphs, self._graphs_seen = count, count()

    def open(self) -> None:
        """Create ``tb/`` now, so importing tensorboard is not timed as part of a step."""
        if self.enabled:
            self._w()

    def scalars(self, values: dict[str, float], step: int) -> None:
        if not self.enabled:
            return
        w = self._w()
        now = time.time()
        if RATE_TAG in values:
            self.rate_windows.append(
                (step, struct.unpack("f", struct.pack("f", float(values[RATE_TAG])))[0])
            )
            if self._graphs is not None:
                seen = self._graphs()
                if seen != self._graphs_seen:
                    self.compile_windows.append(step)
                self._graphs_seen = seen
        with writing(self.log_dir / "tb"):  # the writer's thread's error surfaces here
            for tag, value in values.items():
                w.add_scalar(tag, float(value), step, walltime=now)

    def memory(self, mem: dict[str, dict[str, float]], step: int) -> None:
        self.scalars(
            {f"mem/{dev}/{kind}_mib": v for dev, kinds in mem.items() for kind, v in kinds.items()},
            step,
        )

    def progress(self, **fields: Any) -> None:
        if not self.enabled:
            return
        if self._writer is not None and time.monotonic() - self._flushed_at > FLUSH_EVERY_S:
            with writing(self.log_dir / "tb"):
                self._writer.flush()  # so a live reader sees the events of (nearly) this window
            self._flushed_at = time.monotonic()
        with writing(self.log_dir):
            write_json_atomic(self.log_dir / "progress.json", {**fields, "updated_at": time.time()})

    def summary(self, data: dict[str, Any]) -> None:
        if self.enabled:
            with writing(self.log_dir):
                write_json_atomic(self.log_dir / "summary.json", data)

    def close(self) -> None:
        writer, self._writer, self._flushed_at = self._writer, None, 0.0
        if writer is not None:
            with writing(self.log_dir / "tb"):
                writer.close()
