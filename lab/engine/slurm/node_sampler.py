"""One node's device samples of a Slurm run: ``sys/node<k>/`` scalars as TensorBoard events.

``python -m lab.engine.slurm.node_sampler RUN_DIR --gpus auto|none`` is started by
a Slurm run's job script as an ``srun --overlap`` step, one task per node,
beside the training (a sampler of its own rather than the ranks: it needs no
change to the trainer or a user's script, and it sees the node even while a
rank hangs). Node k (``SLURM_NODEID``) writes into ``RUN_DIR/sys/node<k>/``
every interval: ``sys/node<k>/gpu<i>/{util_pct,mem_used_mib,power_w,temp_c}``
for the job's GPUs on that node (physical indices from ``SLURM_STEP_GPUS``,
``SLURM_JOB_GPUS`` or ``GPU_DEVICE_ORDINAL``, read through
``lab.engine.devices.nvml``), and the whole node's CPU and memory,
``sys/node<k>/host_cpu_pct`` (0-100 % of all its cores) and
``sys/node<k>/host_mem_used_mib`` (through ``lab.engine.procs``: the job's
own processes are another step's, out of this one's sight). It ends on
SIGUSR1, which the job script sends through srun when the training ends, or SIGTERM.
The GPUs, the event and the loop are the one device sampler's
(``lab.engine.devices.sampler``), which the supervisor's extends too.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Mapping

from lab import tags
from lab.engine import procs
from lab.engine.devices.nvml import GpuRecord
from lab.engine.devices.sampler import DeviceSampler
from lab.runfolder import SYS_DIR

log = logging.getLogger(__name__)
# physical indices, in this order of trust
GPU_VARS = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "GPU_DEVICE_ORDINAL")


def node_index(env: Mapping[str, str]) -> int:
    """This node's index in the job (``SLURM_NODEID``), 0 outside Slurm."""
    try:
        return max(0, int(env.get("SLURM_NODEID", "0")))
    except ValueError:
        return 0


def job_gpus(env: Mapping[str, str]) -> tuple[int, ...]:
    """The physical GPU indices Slurm gave the job on this node; empty when it says none."""
    for var in GPU_VARS:
        raw = env.get(var, "")
        if raw.strip():
            try:
                return tuple(int(x) for x in raw.split(",") if x.strip())
            except ValueError:  # e.g. GPU names rather than indices: say so, sample none
                log.warning("%s=%r is not a list of GPU indices: no GPU samples", var, raw)
                return ()
    return ()


class NodeSampler(DeviceSampler):
    """Samples one node's GPUs (those given), CPU and memory into ``RUN_DIR/sys/node<k>``."""

    with_processes = False  # the job's processes are another step's

    def __init__(self, run_dir: Path, node: int, gpus: tuple[int, ...]) -> None:
        self.node, self.pre = node, f"{tags.SYS_NODE}{node}/"
        super().__init__(
            Path(run_dir) / SYS_DIR / f"node{node}", gpus, lambda i, key: f"{self.pre}gpu{i}/{key}"
        )

    def extra(self, gpus: tuple[GpuRecord, ...], *args) -> dict[str, float]:
        cpu = procs.cpu_record()
        return {
            f"{self.pre}host_cpu_pct": cpu.util_pct,
            f"{self.pre}host_mem_used_mib": cpu.mem_used_mib,
        }


class _Flags:
    stop = False


def _on_sigterm(signum, frame) -> None:
    _Flags.stop = True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m lab.engine.slurm.node_sampler", description=__doc__.splitlines()[0]
    )
    ap.add_argument("run_dir")
    ap.add_argument(
        "--gpus",
        choices=("auto", "none"),
        default="auto",
        help="auto: the GPUs Slurm gave the job on this node; none: the CPU and memory only",
    )
    ap.add_argument(
        "--interval", type=float, default=float(os.environ.get("LAB_SAMPLE_INTERVAL_S", "1.0"))
    )
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # USR1: the job script's "training is over" (through srun)
    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, _on_sigterm)
    sampler = NodeSampler(
        Path(args.run_dir),
        node_index(os.environ),
        job_gpus(os.environ) if args.gpus == "auto" else (),
    )
    sampler.every(args.interval, lambda: _Flags.stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
