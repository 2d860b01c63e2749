"""Every scalar tag the lab reads or writes, one name each (DESIGN.md, "Scalar tags").

The trainer (``training/``, which imports nothing of the lab) writes the same names from its own
module, ``training/metrics.py``; tests/test_tags.py holds the two to each other. Like
``lab.runfolder``, any layer of the lab may import this module, and it imports nothing of the lab.
"""

from __future__ import annotations

# the trainer's curves (mean over the global batch; val/ over the whole validation set)
TRAIN_LOSS = "train/loss"
TRAIN_ACC = "train/acc"
VAL_LOSS = "val/loss"
VAL_ACC = "val/acc"
TRAIN_LR = "train/lr"
GRAD_NORM = "train/grad_norm"
GRAD_NORM_WARNING = "train/grad_norm_warning"  # 1 at a step whose gradient norm passed the line

# the trainer's speed, per optimizer step
SAMPLES_PER_SEC = "perf/samples_per_sec"  # global samples/s over the last logging window
STEP_TIME_MS = "perf/step_time_ms"
DATA_TIME_MS = "perf/data_time_ms"
EPOCH_TIME_S = "perf/epoch_time_s"

# the supervisor's samples of the run's process tree and of the machine
SYS_CPU_PCT = "sys/cpu_pct"
SYS_RSS_MIB = "sys/rss_mib"
SYS_OTHER_CPU_PCT = "sys/other_cpu_pct"  # what other processes took of the CPU meanwhile

TRAIN, VAL, PERF, MEM, SYS, HEALTH = "train/", "val/", "perf/", "mem/", "sys/", "health/"
SYS_GPU = "sys/gpu"  # sys/gpu<i>/<leaf>, NVML's physical index
SYS_NODE = "sys/node"  # sys/node<k>/<...>: a Slurm job's node k, sampled there (node_sampler)
SM_ACTIVE = "sm_active_pct"  # sys/gpu<i>/sm_active_pct: SM activity (NVML GPM), beside util_pct


def sys_gpu(index: int | str, leaf: str) -> str:
    """``sys/gpu<index>/<leaf>``, e.g. ``sys_gpu(0, "util_pct")``."""
    return f"{SYS_GPU}{index}/{leaf}"


def mem(device: str, leaf: str) -> str:
    """``mem/<device>/<leaf>``, e.g. ``mem("cuda0", "peak_mib")``."""
    return f"{MEM}{device}/{leaf}"


def health(key: str) -> str:
    """``health/<key>``: 1 at the step a health finding was made."""
    return f"{HEALTH}{key}"
