"""``python -m training.train``: check the inputs, set up the mode, run the loop, write the summary.

Owns the trainer's entry point and its order of events (docs/contracts.md section 1). Every check
runs before anything is written: a refused run prints one ``error: ...`` line on stderr, exits 2 and
leaves the run folder as it found it. Then the process group starts (DDP), the model is seeded and
built (same seed, same weights in every mode), and ``training.loop.Loop`` trains. Rank 0 writes
``summary.json`` at the end, with ``throughput``: the median of the steady logging windows and its
95% interval (``training.throughput``). ``--amp`` means fp16 autocast with a GradScaler on CUDA and
bf16 autocast (no scaler) on CPU; summary.json says which in ``amp_dtype`` and counts the steps the
scaler skipped in ``amp_skipped_steps``. SIGTERM during the loop stops it after the current step
(DDP: after the step all ranks agree on; exit 143, no checkpoint, ``"completed": false``); during
set-up, or a second SIGTERM over ``REPEAT_GRACE_S`` after the first, exits at once with 143. SIGUSR1
prints every thread's stack to stderr (``training.debug``, installed before torch loads);
``--stop-on-nan`` ends a diverged run with exit 3. A full disk (ENOSPC or EDQUOT while writing
events, a checkpoint, progress or summary) ends it with one ``error: disk full: ...`` line naming
the folder and its free space, and exit ``DISK_FULL_EXIT`` (4; ``training.diskfull``)."""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from training.debug import NAN_EXIT, NonFiniteLoss, enable_stack_dumps
from training.diskfull import DISK_FULL_EXIT, DiskFull

# first, before torch loads: the lab may ask a rank stuck at start-up for its stack
enable_stack_dumps()

from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402

from training.cli import DISTRIBUTED, BadInput, parse_args  # noqa: E402

log = logging.getLogger("training")
SIGTERM_EXIT = 143
# A stop of a DDP job signals each rank twice at once: the supervisor's SIGTERM to the process
# group, then
# torchrun's agent forwarding its own. Only a repeat after this long is someone insisting.
REPEAT_GRACE_S = 3.0


class _Stop:
    """Set by SIGTERM while the loop runs; polled after every step. ``recorder``: rank 0's
    writer, closed (what it holds written, if there is room) when a full disk ends the run."""

    in_loop = False
    requested = False
    at = 0.0
    recorder = None  # closed when a full disk ends the run


def _on_sigterm(signum: int, frame: Any) -> None:
    if not _Stop.in_loop or (_Stop.requested and time.monotonic() - _Stop.at > REPEAT_GRACE_S):
        raise SystemExit(SIGTERM_EXIT)
    if not _Stop.requested:
        _Stop.requested, _Stop.at = True, time.monotonic()


def _check_log_dir(log_dir: Path) -> None:
    if log_dir.exists() and not log_dir.is_dir():
        raise BadInput(f"--log-dir {log_dir} is a file: give a folder for the run")
    ancestor = log_dir
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not os.access(ancestor, os.W_OK):
        raise BadInput(
            f"--log-dir {log_dir}: {ancestor} is not writable; pick a folder you can write to"
        )


def _setup_logging(rank: int, ddp: bool) -> None:
    prefix = f"[rank {rank}] " if ddp else ""
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format=f"%(asctime)s {prefix}%(levelname)s %(message)s",
        force=True,
    )


def _device_order(name: str) -> tuple:
    m = re.fullmatch(r"(?:(node|rank)(\d+):)?(\D*)(\d*)", name)  # node1:cuda0; cuda2 before cuda10
    return (m[1] or "", int(m[2] or -1), m[3], int(m[4] or 0)) if m else ("~", 0, name, 0)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _prepare(argv: Sequence[str] | None):
    """All checks that may refuse the run; nothing is written here."""
    from training import checkpoint, compiling, data, knobs, models
    from training.cli import split_batch
    from training.distributed import check_free_memory, place
    from training.profiling import check_memory_snapshot

    args = parse_args(argv)
    models.check(args.model, args.image_size)
    log_dir = Path(args.log_dir).expanduser()
    _check_log_dir(log_dir)
    placement = place(args.mode, args.device, args.batch_size)
    knobs.check(args, placement)
    compiling.check(args, placement)
    check_memory_snapshot(args.memory_snapshot, placement)
    bundle = data.load(args.dataset, args.image_size, args.data_delay_ms)
    per_rank_images = len(bundle.train) // placement.world_size
    per_rank_batch = split_batch(args.batch_size, placement.world_size, "ranks")
    if per_rank_images < per_rank_batch:
        raise BadInput(
            f"{bundle.name} has {len(bundle.train)} training images, fewer than one batch of "
            f"{args.batch_size}: use --batch-size {per_rank_images * placement.world_size} or less"
        )
    # torchrun --max-restarts
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0) > 0
    path = checkpoint.resolve(args.resume, log_dir, restarted)
    state = checkpoint.load(path) if path else None
    check_free_memory(placement)
    return args, log_dir, placement, bundle, state, path


def _summary(
    args, placement, loop, out, started_at: str, wall_s: float, peak: dict[str, float]
) -> dict[str, Any]:
    import torch

    from training import knobs
    from training.throughput import window_spread

    g = args.batch_size
    steady_steps = out.steps_this_run - out.steady_excluded_steps
    summary = {
        "config": vars(args),
        "mode": args.mode,
        "effective_mode": placement.effective_mode,
        "effective_mode_reason": placement.effective_mode_reason,
        "world_size": placement.world_size,
        "nnodes": placement.nnodes,
        "backend": placement.backend,
        "devices": sorted(peak, key=_device_order) or placement.device_names,
        "global_batch": g,
        "per_device_batch": placement.per_device_batch,
        "steps": out.steps,
        "epochs_completed": loop.start_epoch + out.epochs_completed,
        "samples_seen": out.steps * g,
        "wall_time_s": wall_s,
        "throughput_samples_per_sec": out.steps_this_run * g / out.train_time_s
        if out.train_time_s > 0
        else None,
        "steady_throughput_samples_per_sec": steady_steps * g / out.steady_time_s
        if out.steady_time_s > 0 and steady_steps > 0
        else None,
        "steady_excluded_steps": out.steady_excluded_steps,
        "compile_s": loop.watch.seconds,  # --compile on: the steps that compiled, kept apart
        "compile_steps": loop.watch.steps if args.compile == "on" else None,
        "throughput": window_spread(loop.rec.rate_windows, loop.rec.compile_windows),
        "compile_windows": loop.rec.compile_windows if args.compile == "on" else None,
        "epoch_time_s": sum(out.epoch_times) / len(out.epoch_times) if out.epoch_times else None,
        "final": out.final,
        "peak_mem_mib": peak,
        "amp": loop.precision != "fp32",
        "amp_dtype": {"fp16": "float16", "bf16": "bfloat16"}.get(loop.precision),
        "precision": loop.precision,
        "precision_policy": knobs.precision_policy(loop.precision, placement.effective_mode),
        **knobs.accumulation_record(args, placement.per_device_batch),
        "batchnorm": knobs.has_batchnorm(loop.model_without_ddp),
        "sync_bn": any(isinstance(m, torch.nn.SyncBatchNorm) for m in loop.model.modules()),
        "amp_skipped_steps": out.amp_skipped_steps,
        "torch_version": torch.__version__,
        **knobs.numerics_record(),
        "hostname": socket.gethostname(),
        "started_at": started_at,
        "ended_at": _now(),
        "completed": not out.stopped,
    }
    if loop.prof.written:  # only when profiling ran: profile/breakdown.json, memory snapshots
        summary["profile"] = dict(loop.prof.written)
    return summary


def _set_up(argv: Sequence[str] | None):
    """Checks, the process group, the seeded model and the loop; ``BadInput`` before anything is
    written."""
    args, log_dir, placement, bundle, state, ckpt_path = _prepare(argv)
    import torch

    from training import checkpoint, knobs, memory, models
    from training.distributed import init_distributed_mode
    from training.loop import Loop
    from training.metrics import Recorder

    init_distributed_mode(placement, args.dist_timeout, cpu_collectives=args.fsdp_cpu_offload)
    # the estimate's meta forward first, then the baseline: neither is in the measured peak
    est = memory.device_estimates(
        placement,
        args.model,
        bundle.channels,
        bundle.num_classes,
        args.image_size,
        knobs.precision(args, placement.device),
        knobs.micro_batch(args, placement.per_device_batch),
        args.grad_as_bucket_view,
        args.reshard_after_forward != "off",
        args.accum_steps,
        bool(getattr(args, "fsdp_cpu_offload", False)),
    )
    if placement.is_main:  # rank 0's event writer loads tensorboard: a library, not training
        import torch.utils.tensorboard  # noqa: F401
    measure = memory.Measure(placement)
    torch.manual_seed(args.seed)  # same weights in every mode; DDP also broadcasts rank 0's
    model = models.build(args.model, bundle.channels, bundle.num_classes)
    recorder = Recorder(log_dir, enabled=placement.is_main)
    loop = Loop(args, placement, bundle, model, recorder, state, stop=lambda: _Stop.requested)
    loop.memory = (est, measure)
    note = checkpoint.origin(state, placement.effective_mode, placement.world_size)
    return args, log_dir, placement, bundle, (ckpt_path, note), recorder, loop


def _announce(args, log_dir: Path, placement, bundle, resumed: tuple, loop) -> None:
    ckpt_path, note = resumed  # note: how a sharded checkpoint met this run's ranks
    if placement.effective_mode_reason:
        log.warning(
            "--mode dp has nothing to split: %s; training on %s",
            placement.effective_mode_reason,
            placement.device,
        )
    if args.resume == "auto" and ckpt_path is None:
        log.info("--resume auto: no checkpoint in %s, starting fresh", log_dir / "checkpoints")
    if ckpt_path is not None:
        log.info(
            "resumed from %s at step %d (epoch %d, %d steps into it)%s",
            ckpt_path,
            loop.step,
            loop.start_epoch,
            loop.skip_batches,
            note,
        )
    log.info(
        "%s on %s (world size %d, batch %d global / %d per device), %d steps, data %s",
        placement.effective_mode,
        placement.device,
        placement.world_size,
        args.batch_size,
        placement.per_device_batch,
        loop.total_steps,
        bundle.name,
    )


@record
def main(argv: Sequence[str] | None = None) -> int:
    """Run the trainer; return the process exit code (0, 2, 3 on a NaN loss with --stop-on-nan,
    ``DISK_FULL_EXIT`` when the run folder's disk is full, or 143)."""
    try:
        return _main(argv)
    except DiskFull as e:
        try:  # what was queued for the event file goes out if there is room; the line first
            print(e.line(), file=sys.stderr, flush=True)
        except OSError:  # stderr on the full disk too: the exit code still says it
            pass
        if _Stop.recorder is not None:
            try:
                _Stop.recorder.close()
            except DiskFull:
                pass
        return DISK_FULL_EXIT


def _main(argv: Sequence[str] | None) -> int:
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        args, log_dir, placement, bundle, resumed, recorder, loop = _set_up(argv)
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    _Stop.recorder = recorder
    from training import memory
    from training.distributed import barrier_then_destroy, gather_objects
    from training.memory import reserved_record
    from training.metrics import gathered_memory_mib, local_memory_mib, merge_memory

    _setup_logging(placement.rank, placement.effective_mode in DISTRIBUTED)
    _announce(args, log_dir, placement, bundle, resumed, loop)
    recorder.open()
    started_at, t0 = _now(), time.perf_counter()
    _Stop.in_loop = True
    try:
        out = loop.run()
    # every rank sees the same global loss: all leave here, no collective after
    except NonFiniteLoss as e:
        print(f"error: {e}", file=sys.stderr)
        recorder.close()
        return NAN_EXIT
    except Exception:
        # a peer that stopped first broke a collective: that is the stop, not a crash
        if _Stop.requested:
            log.warning("stopped by SIGTERM during a collective")
            return SIGTERM_EXIT
        raise
    _Stop.in_loop = False
    if out.stopped:
        # No collectives past this point: the other ranks are stopping too, maybe already gone.
        log.warning(
            "SIGTERM: stopped after step %d without a checkpoint%s",
            out.steps,
            "" if _Stop.requested else " (another rank was asked to stop)",
        )
        mem = local_memory_mib(placement)
        local = {d: v["peak"] for d, v in mem.items()}
        summary = _summary(
            args, placement, loop, out, started_at, time.perf_counter() - t0, loop.peak_mem or local
        )
        summary.update(reserved_record(mem))
        est, measure = loop.memory
        summary["memory"] = memory.block(
            memory.local(est, measure), measure.measured(), measure.allocator
        )
        recorder.summary(summary)
        recorder.close()
        return SIGTERM_EXIT
    mem = gathered_memory_mib(placement)
    peak = {d: v["peak"] for d, v in mem.items()}
    summary = _summary(args, placement, loop, out, started_at, time.perf_counter() - t0, peak)
    summary.update(reserved_record(mem))
    est, measure = loop.memory
    # a collective in DDP: every rank's devices
    parts = merge_memory(gather_objects(memory.local(est, measure)))
    summary["memory"] = memory.block(parts, measure.measured(), measure.allocator)
    recorder.summary(summary)
    recorder.close()
    if placement.is_main:
        sps = (
            summary["steady_throughput_samples_per_sec"]
            or summary["throughput_samples_per_sec"]
            or 0.0
        )
        val_acc = out.final.get("val_acc")
        log.info(
            "done: %d steps, %.0f samples/s steady, val acc %s",
            out.steps,
            sps,
            "n/a" if val_acc is None else f"{val_acc:.3f}",
        )
    barrier_then_destroy()
    return 0


if __name__ == "__main__":
    from training.distributed import exit_process

    try:
        exit_process(main())
    except KeyboardInterrupt:  # Ctrl-C by hand: a line, not a traceback
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
