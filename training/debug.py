"""The trainer's aids for a run that goes wrong: stacks on demand, a stop on a NaN loss, a slow
input, a test seam.

Owns four small things the lab's health checks lean on (docs/contracts.md
section 1): ``enable_stack_dumps`` makes SIGUSR1 print every thread's Python
stack to the rank's stderr (``faulthandler``; the lab cuts it out of the
rank's log into ``stacks/``), with no outside tool; ``check_loss`` ends the
run with ``NonFiniteLoss`` (exit ``NAN_EXIT``) when ``--stop-on-nan`` is on
and ``train/loss`` is not finite; ``Delayed`` wraps a data set so each batch
waits ``--data-delay-ms`` (a slow input pipeline, simulated: DataLoader
workers overlap the wait as they would a slow decode); and ``hang_if_asked``
is a test seam: with ``LAB_TEST_HANG_RANK=<rank>`` in its environment that
rank blocks forever before its first training step (so before its first
all-reduce), as a rank stuck in a collective or a deadlock would. Nothing
else reads that variable.
"""

from __future__ import annotations

import faulthandler
import logging
import math
import os
import signal
import threading
import time
from typing import Any, Sequence

log = logging.getLogger(__name__)
STACK_SIGNAL = signal.SIGUSR1
NAN_EXIT = 3  # the exit code of a run stopped by --stop-on-nan
HANG_ENV = "LAB_TEST_HANG_RANK"


def enable_stack_dumps() -> None:
    """SIGUSR1 prints every thread's stack to stderr, and the process goes on."""
    faulthandler.register(STACK_SIGNAL, all_threads=True)


class NonFiniteLoss(Exception):
    """``train/loss`` turned NaN or infinite under ``--stop-on-nan``; the message is the one line to
    print."""


def check_loss(loss: float, step: int, enabled: bool) -> None:
    """Raise ``NonFiniteLoss`` when ``enabled`` and ``loss`` (the global one, alike on every rank)
    is not finite."""
    if enabled and not math.isfinite(loss):
        raise NonFiniteLoss(
            f"train/loss is {loss} at step {step} (--stop-on-nan): the run diverged; lower --lr "
            "(e.g. by 10x), "
            "set --grad-norm-warn to see the gradient spikes first, or turn off --amp if fp16 "
            "overflows"
        )


class Delayed:
    """``inner`` (a map-style data set) with ``delay_ms`` of waiting for every batch a DataLoader
    fetches.

    Not a torch ``Dataset`` subclass: this module loads before torch does.
    """

    def __init__(self, inner: Any, delay_ms: float) -> None:
        self.inner, self.delay_s = inner, delay_ms / 1000.0

    def __len__(self) -> int:
        return len(self.inner)  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> Any:
        return self.inner[i]

    def __getitems__(self, indices: Sequence[int]) -> Any:
        time.sleep(self.delay_s)
        get = getattr(self.inner, "__getitems__", None)
        return get(indices) if get else [self.inner[i] for i in indices]


def hang_if_asked(rank: int) -> None:
    """Test seam: block forever when ``LAB_TEST_HANG_RANK`` names this rank."""
    if os.environ.get(HANG_ENV) == str(rank):
        log.warning(
            "%s=%s: rank %d blocks here forever (a test of stalled-run detection)",
            HANG_ENV,
            rank,
            rank,
        )
        block_forever_for_tests()


def block_forever_for_tests() -> None:
    """Wait on an event nobody sets: the call a stack dump shows for the blocked rank."""
    threading.Event().wait()
