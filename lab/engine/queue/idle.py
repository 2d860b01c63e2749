"""``--wait-for-idle``: a run that asked for it starts only once the machine is free of foreign
work, by the rule the lab already judges runs with (``lab.engine.devices.interference``): the
GPUs it needs hold no process outside this supervisor's tree, and others use under 20% of every
core, over ``QUIET_READINGS`` readings in a row a second apart. It waits after its turn in the
queue came (no lab run then holds its devices), saying why in status.json's ``queue``."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

from lab.engine import procs
from lab.engine.devices import nvml as devices
from lab.engine.devices.interference import OtherCpu, classify, sample_is_busy

QUIET_READINGS = 3
READ_S = 1.0


def busy_reason(gpus: Sequence[int], cpu: OtherCpu) -> str | None:
    """Why the machine is not idle for a run on ``gpus`` now, or None; the first CPU reading only
    sets the clocks (None for the CPU)."""
    tree = procs.tree(os.getpid())  # this supervisor: its own CPU is not another's
    ours = {p.pid for p in tree}
    for g in devices.read_gpus(tuple(gpus)) if gpus else ():
        foreign, _unseen = classify(g.processes, ours)
        if foreign:
            pids = ", ".join(str(p.pid) for p in foreign[:3])
            return f"GPU {g.index} holds other processes (pid {pids})"
    other = cpu.read(tree)
    if other is not None and sample_is_busy(other, cpu.cores):
        return f"other processes use {other / 100:.1f} cores of {cpu.cores}"
    return None


def wait_idle(
    gpus: Sequence[int],
    on_wait: Callable[[str], None],
    cancelled: Callable[[], bool],
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Block until ``QUIET_READINGS`` quiet readings in a row (True), or ``cancelled()`` (False);
    ``on_wait(reason)`` whenever the reason to wait changes."""
    cpu = OtherCpu()
    quiet, shown = 0, None
    while quiet < QUIET_READINGS:
        if cancelled():
            return False
        reason = busy_reason(gpus, cpu)
        quiet = 0 if reason else quiet + 1
        if reason and reason != shown:
            on_wait(reason)
            shown = reason
        sleep(READ_S)
    return True
