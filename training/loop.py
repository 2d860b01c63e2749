"""The training loop: steps, logging windows, validation, checkpoints and timing.

Owns what happens between the first and the last optimizer step, identically
in every mode: the same ``DistributedSampler`` (``num_replicas=1`` outside
DDP) and ``drop_last`` everywhere, so a single-device run and a DDP run over
the same global batch see the same samples at the same step. Per-step work is
kept to tensors on the device; ``.item()`` and collectives happen only at the
end of a logging window (or every step when ``--grad-norm-warn`` is on), so
the harness costs little over a bare loop. ``stop`` is polled after every step
so SIGTERM ends the run within one step; DDP ranks agree on it every
``STOP_SYNC_EVERY`` steps, so all leave at the same step, through an asynchronous vote on
the CPU (``distributed.StopVote``: no host-device sync, so DDP pays no sync the other modes
do not). With a GradScaler
every step's gradient norm is taken to count skipped steps (``metrics.GradWatch``).
A non-finite window loss ends the run under ``--stop-on-nan`` (``training.debug``).
``run`` is the epoch loop around ``train_one_epoch`` (torchvision's shape). A step's forward and
backward are ``training.knobs.forward_backward`` (``--accum-steps`` micro-batches, ``no_sync``).
``--compile on`` compiles the wrapped model; the steps that compile stay out of the steady span.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, Subset

from training import checkpoint, compiling, knobs
from training.cli import DISTRIBUTED
from training.data import DataBundle, ResumableSampler, TensorImages, collate
from training.debug import check_loss, hang_if_asked
from training.distributed import Placement, StopVote, reduce_across_processes, wrap
from training.metrics import GradWatch, Recorder, Span, Window, gathered_memory_mib
from training.profiling import StepProfiler

log = logging.getLogger(__name__)
# DDP: steps between the ranks' agreements on a stop; not every step, as each syncs the host with
# the device
STOP_SYNC_EVERY = 5


@dataclass
class Outcome:
    """What the loop reports for summary.json."""

    steps: int = 0
    steps_this_run: int = 0
    epochs_completed: int = 0
    train_time_s: float = 0.0
    steady_time_s: float = 0.0
    steady_excluded_steps: int = 0
    epoch_times: list[float] = field(default_factory=list)
    final: dict[str, float | None] = field(default_factory=dict)
    stopped: bool = False
    amp_skipped_steps: int | None = None


class Loop:
    """One run's loop; ``run()`` trains until total steps, the epochs, or ``stop()``."""

    def __init__(
        self,
        args: Any,
        placement: Placement,
        data: DataBundle,
        model: nn.Module,
        recorder: Recorder,
        state: dict[str, Any] | None,
        stop: Callable[[], bool],
    ) -> None:
        self.args, self.p, self.data, self.rec, self.stop = args, placement, data, recorder, stop
        self.device = placement.device
        model = knobs.sync_bn(model, args, placement.effective_mode)
        self.model_without_ddp = model
        if args.channels_last:
            model.to(memory_format=torch.channels_last)
        self.precision = knobs.precision(args, self.device)
        amp_dtype = knobs.DTYPES.get(self.precision)
        self.model = wrap(
            model, placement, knobs.ddp_options(args), amp_dtype, knobs.fsdp_options(args)
        )
        self.model = compiling.compile_model(self.model, args, placement.effective_mode)
        self.vote = StopVote()  # DDP's stop vote: asynchronous, no .item() on the device
        # The optimizer comes after the wrap so it holds the parameters the wrapper trains.
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=args.lr, momentum=0.9)
        cuda = self.device.type == "cuda"
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.precision == "fp16" and cuda)
        self.grads = GradWatch(self.device, self.scaler.is_enabled(), args.grad_norm_warn)
        self.autocast = knobs.autocast(self.precision, self.device, placement.effective_mode)
        self.criterion = nn.CrossEntropyLoss().to(self.device)
        # DP splits the global batch itself
        self.loader_batch = args.batch_size // placement.world_size
        inner = DistributedSampler(
            data.train,
            num_replicas=placement.world_size,
            rank=placement.rank,
            shuffle=True,
            seed=args.seed,
            drop_last=True,
        )
        self.sampler = ResumableSampler(inner)
        self.loader = DataLoader(
            data.train,
            batch_size=self.loader_batch,
            sampler=self.sampler,
            drop_last=True,
            num_workers=args.workers,
            collate_fn=collate,
            pin_memory=cuda,
            persistent_workers=args.workers > 0,
        )
        self.steps_per_epoch = len(inner) // self.loader_batch
        planned = args.epochs * self.steps_per_epoch if args.epochs >= 1 else math.inf
        self.total_steps = int(min(planned, args.max_steps) if args.max_steps > 0 else planned)
        self.epochs = (
            args.epochs if args.epochs >= 1 else math.ceil(self.total_steps / self.steps_per_epoch)
        )
        self.step, self.start_epoch, self.skip_batches = 0, 0, 0
        if state is not None:
            self._restore(state)
        self.last_val: dict[str, float] = {}
        self.last_val_step = -1
        self.paused_s = 0.0  # time in validation and checkpoints, kept out of throughput
        self.last_train: dict[str, float] = {}
        self.peak_mem: dict[str, float] = {}
        self.memory: tuple[dict, Any] = ({}, None)  # (estimate, training.memory.Measure): train.py
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.prof = StepProfiler(
            args, placement, recorder.log_dir, first_step=self.step, last_step=self.total_steps
        )

    def _restore(self, state: dict[str, Any]) -> None:
        fsdp = self.p.effective_mode == "fsdp"
        checkpoint.restore(self.model_without_ddp, self.optimizer, state, self.args.model, fsdp)
        if state.get("scaler") and self.scaler.is_enabled():
            self.scaler.load_state_dict(state["scaler"])
        self.step, self.start_epoch = int(state["step"]), int(state["epoch"])
        self.skip_batches = int(state.get("batch_in_epoch", 0))

    # -- the steps -------------------------------------------------------
    def run(self) -> Outcome:
        """Train from the current step to the last one (or a stop); the figures summary.json
        needs."""
        out = Outcome(steps_this_run=max(0, self.total_steps - self.step))
        out.steady_excluded_steps = min(5, out.steps_this_run // 5)
        self.first_step, self.t_start = self.step, time.perf_counter()
        # steady restarts after the excluded first steps
        self.total = self.steady = Span(self.paused_s)
        self.watch = compiling.Watch(self.args, self.rec, self.p.is_main, self.paused_s, self.step)
        self.window = Window(self.device, self.paused_s)
        self.prof.begin()
        hang_if_asked(self.p.rank)  # a test seam only: LAB_TEST_HANG_RANK
        for epoch in range(self.start_epoch, self.epochs):
            if self.step >= self.total_steps or out.stopped:
                break
            t_epoch = time.perf_counter()
            done = self.train_one_epoch(epoch, out)
            if not out.stopped:
                self._end_epoch(epoch, done, t_epoch, out)
        return self._finish(out)

    def train_one_epoch(self, epoch: int, out: Outcome) -> int:
        """This epoch's steps, up to its end, the last step or a stop; returns its batches done so
        far."""
        self.sampler.set_epoch(epoch)
        done = self.skip_batches if epoch == self.start_epoch else 0
        self.sampler.skip = done * self.loader_batch
        batches = iter(self.batches())
        # drop_last everywhere: the epoch yields exactly steps_per_epoch - skip batches.
        while done < self.steps_per_epoch:
            with self.prof.step(self.step + 1):
                self._train_step(batches, epoch, out)
            done += 1
            if self.prof.due(self.step):
                self._paused(self.prof.write)
            if self.args.val_every and self.step % self.args.val_every == 0:
                self._paused(self.validate)
            if self._stop_now():
                out.stopped = True
                break
            if self.step >= self.total_steps:
                break
        return done

    def _stop_now(self) -> bool:
        """Stop after this step? In DDP all ranks must answer alike, or one waits forever in a
        collective (under NCCL it ignores SIGTERM until the watchdog fires, and rank 0 would die
        before its summary)."""
        if self.p.effective_mode not in DISTRIBUTED:
            return self.stop()
        return self.step % STOP_SYNC_EVERY == 0 and self.vote(self.stop())

    def _train_step(
        self, batches: Iterator[tuple[torch.Tensor, torch.Tensor]], epoch: int, out: Outcome
    ) -> None:
        a, phase = self.args, self.prof.phase
        t_data = time.perf_counter()
        with phase("data"):
            x, y = next(batches)
            self.window.data_s += time.perf_counter() - t_data
            x = x.to(self.device, non_blocking=True)
            y = y.to(self.device, non_blocking=True)
            if a.channels_last and x.dim() == 4:
                x = x.contiguous(memory_format=torch.channels_last)
        loss, logits = knobs.forward_backward(self, x, y)
        log_now = (self.step + 1) % a.log_every == 0 or self.step + 1 == self.total_steps
        with phase("optimizer"):
            grad_norm = None
            if log_now or a.grad_norm_warn > 0 or self.grads.scaler_on:
                self.scaler.unscale_(self.optimizer)
                grad_norm = torch.nn.utils.get_total_norm(
                    [p.grad for p in self.params if p.grad is not None]
                )
                if hasattr(grad_norm, "full_tensor"):  # FSDP: each rank's shards' norm, combined
                    grad_norm = grad_norm.full_tensor()
                self.grads.step(grad_norm)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        self.step += 1
        self.window.update(loss, logits, y)
        if a.grad_norm_warn > 0:
            self.grads.check(float(grad_norm), self.step, self.p.is_main, self.rec)
        if self.watch.active:  # --compile on: the steps that compile stay out of the steady span
            self._sync()
            self.watch.step_done(self.paused_s, out)
        if self.step - self.first_step == out.steady_excluded_steps and out.steady_excluded_steps:
            self._sync()
            self.steady = Span(self.paused_s)
        if log_now:
            self._sync()
            self._log_window(float(grad_norm), epoch)
            self.window.restart(self.paused_s)

    def _end_epoch(self, epoch: int, done: int, t_epoch: float, out: Outcome) -> None:
        if done >= self.steps_per_epoch:  # a full epoch, not one cut by --max-steps
            out.epochs_completed += 1
            self._sync()
            out.epoch_times.append(time.perf_counter() - t_epoch)
            self.rec.scalars({"perf/epoch_time_s": out.epoch_times[-1]}, self.step)
            if not self.args.val_every:
                self._paused(self.validate)
            self._paused(lambda: self._save(epoch + 1, 0))
        elif self.step >= self.total_steps:
            self._paused(lambda: self._save(epoch, done))

    def _finish(self, out: Outcome) -> Outcome:
        self.prof.close()
        self.vote.close()
        self.watch.finish()
        self._sync()
        out.steps = self.step
        out.amp_skipped_steps = self.grads.skipped_steps()
        out.train_time_s = self.total.seconds(self.paused_s)
        out.steady_time_s = self.steady.seconds(self.paused_s)
        if not out.stopped and self.last_val_step != self.step and len(self.data.val):
            self.validate()  # so summary.json always carries the final validation figures
        out.final = {
            "train_loss": self.last_train.get("loss"),
            "train_acc": self.last_train.get("acc"),
            "val_loss": self.last_val.get("loss"),
            "val_acc": self.last_val.get("acc"),
        }
        return out

    def batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This epoch's batches: the DataLoader, or for in-memory data the same batches by slicing
        (what the DataLoader would yield, without its per-batch Python cost: visible for a small
        model)."""
        train = self.data.train
        if not isinstance(train, TensorImages) or self.args.workers > 0:
            yield from self.loader
            return
        order = torch.tensor(list(iter(self.sampler)), dtype=torch.long)
        b = self.loader_batch
        for i in range(0, len(order) - b + 1, b):
            idx = order[i : i + b]
            yield train.images[idx], train.labels[idx]

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _paused(self, fn: Callable[[], None]) -> None:
        t = time.perf_counter()
        fn()
        self.paused_s += time.perf_counter() - t

    def _log_window(self, grad_norm: float, epoch: int) -> None:
        w = self.window
        window_s = w.span.seconds(self.paused_s)
        totals = reduce_across_processes(w.totals()).tolist()  # global figures, not rank 0's share
        loss, acc = totals[0] / totals[2], totals[1] / totals[2]
        sps = totals[2] / window_s if window_s > 0 else 0.0
        self.last_train = {"loss": loss, "acc": acc}
        mem = gathered_memory_mib(self.p)  # a collective in DDP: every rank calls it here
        # the same on every rank: the gradients are all-reduced
        skipped = self.grads.skipped_steps()
        self.rec.scalars(
            {
                "train/loss": loss,
                "train/acc": acc,
                "train/lr": self.optimizer.param_groups[0]["lr"],
                "train/grad_norm": grad_norm,
                "perf/samples_per_sec": sps,
                "perf/step_time_ms": 1000 * window_s / w.steps,
                "perf/data_time_ms": 1000 * w.data_s / w.steps,
                **({} if skipped is None else {"amp/skipped_steps": skipped}),
            },
            self.step,
        )
        self.rec.memory(mem, self.step)
        self.peak_mem = {d: v["peak"] for d, v in mem.items()}
        self.rec.progress(
            step=self.step,
            total_steps=self.total_steps,
            epoch=epoch,
            epochs=self.epochs,
            samples_per_sec=sps,
            elapsed_s=time.perf_counter() - self.t_start,
            steps_per_epoch=self.steps_per_epoch,
            num_classes=self.data.num_classes,
        )
        if self.p.is_main:
            log.info(
                "step %d/%d loss %.3f acc %.2f %.0f samples/s",
                self.step,
                self.total_steps,
                loss,
                acc,
                sps,
            )
        # after the scalars: the NaN is on the chart too
        check_loss(loss, self.step, self.args.stop_on_nan)

    @torch.no_grad()
    def validate(self) -> None:
        """Loss and accuracy over the whole validation set, each rank taking every world-th
        image, a micro-batch at a time: a run that needed accumulation to fit its training step
        must not run out of memory in validation. Every rank runs the same number of forwards
        (``val_batches``): under FSDP each forward all-gathers, so a rank with one batch fewer
        would leave the others waiting in a collective for ever; its extra forwards count for
        nothing."""
        if not len(self.data.val):
            return
        p = self.p
        # DDP's forward hooks are for training; DP keeps its wrapper to use every GPU.
        model = self.model if p.effective_mode == "dp" else self.model_without_ddp
        model.eval()
        totals = torch.zeros(3, device=self.device)
        for x, y, real in self.val_batches():
            x, y = x.to(self.device), y.to(self.device)
            with self.autocast, compiling.eager(self.args):
                logits = model(x)
            if not real:
                continue
            totals[0] += nn.functional.cross_entropy(logits.float(), y, reduction="sum")
            totals[1] += (logits.argmax(1) == y).sum()
            totals[2] += y.shape[0]
        model.train()
        loss_sum, correct, n = reduce_across_processes(totals).tolist()
        self.last_val = {"loss": loss_sum / max(n, 1), "acc": correct / max(n, 1)}
        self.last_val_step = self.step
        self.rec.scalars(
            {"val/loss": self.last_val["loss"], "val/acc": self.last_val["acc"]}, self.step
        )
        if p.is_main:
            log.info(
                "step %d validation loss %.3f acc %.3f",
                self.step,
                self.last_val["loss"],
                self.last_val["acc"],
            )

    def val_batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, bool]]:
        """This rank's validation batches as ``(x, y, real)``: its every world-th image in
        micro-batches, then, where another rank has more batches, repeats of its first batch
        marked not real, so that every rank runs ``ceil(ceil(len / world) / batch)`` forwards."""
        p, val = self.p, self.data.val
        batch = knobs.micro_batch(self.args, self.loader_batch)
        shard = Subset(val, range(p.rank, len(val), p.world_size))
        loader = DataLoader(
            shard,
            batch_size=batch,
            shuffle=False,
            collate_fn=collate,
            num_workers=self.args.workers,
        )
        most = math.ceil(math.ceil(len(val) / p.world_size) / batch)
        first = None
        for x, y in loader:
            first = first if first is not None else (x, y)
            yield x, y, True
        if first is None:  # fewer images than ranks: this rank's forwards use image 0
            first = collate([val[0]])
        for _ in range(most - len(loader)):
            yield first[0], first[1], False

    def _save(self, epoch: int, batch_in_epoch: int) -> None:
        if self.args.checkpoint == "none":
            return
        # every rank: FSDP's shards are gathered for last.pt and each rank writes its own to DCP
        checkpoint.write(
            self.rec.log_dir / "checkpoints",
            self.model_without_ddp,
            self.optimizer,
            {
                "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None,
                "step": self.step,
                "epoch": epoch,
                "batch_in_epoch": batch_in_epoch,
                "config": vars(self.args),
            },
            fsdp=self.p.effective_mode == "fsdp",
            is_main=self.p.is_main,
        )
