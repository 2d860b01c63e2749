"""NCCL presets: named sets of NCCL environment variables a run can be launched with.

A preset is a lab option (``--nccl-preset NAME``), not the trainer's: its variables land in the
run's environment (``lab.engine.launch.environment``, before the user's own ``--env``, which wins
on a clash) and so in run.json's ``env``; ``config.nccl_preset`` records the name. The sets are
starting points taken from the seeds (the articles the lab is built on), not measured advice:
whether one helps on a given machine is what an A/B run measures. Under gloo (no GPUs) NCCL is
not used, and the pre-flight says the preset has no effect there (``lab.engine.preflight``).

``single-node-nvlink`` disables InfiniBand, so it is refused on several nodes (``preset_problem``).
``debug`` writes NCCL's set-up log (``INIT,ENV,GRAPH,TUNING``: transports, variables read,
algorithm and protocol choices, not every collective) to ``NCCL_DEBUG_FILE`` in the run folder
(``nccl-debug.<host>.<pid>.log``; other nodes log to their output) and marks the run as not for
timing (``NOT_FOR_TIMING``: run.json's ``not_for_timing``). ``p2p-off`` turns GPU peer-to-peer
off: the fix for consumer PCIe cards and IOMMU/ACS hangs. ``nccl_env`` is every ``NCCL_*``
variable a run's processes get (run.json's ``nccl_env``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# name -> (variables, what it is for); docs/cli.md has the same table
PRESETS: dict[str, tuple[dict[str, str], str]] = {
    "single-node-nvlink": (
        {"NCCL_P2P_DISABLE": "0", "NCCL_SHM_DISABLE": "0", "NCCL_IB_DISABLE": "1"},
        "one machine: GPU peer-to-peer and shared memory on, InfiniBand off; these are NCCL's "
        "defaults on one machine, so an A/B against no preset measures the noise",
    ),
    "p2p-off": (
        {"NCCL_P2P_DISABLE": "1"},
        "GPU peer-to-peer off: for consumer PCIe cards and IOMMU/ACS hangs (NVML's P2P not OK)",
    ),
    "no-infiniband": (
        {"NCCL_IB_DISABLE": "1"},
        "sockets instead of InfiniBand (a node whose IB is absent or misbehaves)",
    ),
    "sockets": (
        {"NCCL_IB_DISABLE": "1", "NCCL_NSOCKS_PERTHREAD": "4"},
        "TCP between nodes, with more sockets per thread",
    ),
    "ring": ({"NCCL_ALGO": "Ring"}, "the ring algorithm only, for every collective"),
    "debug": (
        {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,GRAPH,TUNING"},
        "NCCL's set-up log (transports, variables, tuning) in the run folder; not for timing",
    ),
}
NAMES = tuple(PRESETS)
ONE_NODE = ("single-node-nvlink",)
DEBUG_FILE = "nccl-debug.%h.%p.log"  # NCCL expands %h (host) and %p (pid)
NOT_FOR_TIMING = {"debug": "NCCL debug logging (preset debug) slows set-up and collectives"}


def preset_env(name: str, run_dir: Path | str | None = None) -> dict[str, str]:
    """The variables of preset ``name`` (none for an empty name); ``debug`` with ``run_dir``
    also sets ``NCCL_DEBUG_FILE`` there."""
    env = dict(PRESETS[name][0]) if name else {}
    if name == "debug" and run_dir is not None:
        env["NCCL_DEBUG_FILE"] = str(Path(run_dir) / DEBUG_FILE)
    return env


def preset_problem(name: object, nnodes: object = 1) -> str | None:
    """What is wrong with a preset name (one line naming the choices), or None; ``nnodes``: the
    run's node count (a one-machine preset is refused on several)."""
    if name in ONE_NODE and isinstance(nnodes, int) and nnodes > 1:
        return (
            f"NCCL preset {name} turns InfiniBand off and is for one machine, not {nnodes} "
            "nodes: use no-infiniband, sockets or none"
        )
    if name == "" or name in PRESETS:
        return None
    return f"unknown NCCL preset {name!r}: use one of {', '.join(NAMES)} (or none)"


def nccl_env(env: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every ``NCCL_*`` variable of a run: ``base`` (the launcher's own environment, default
    ``os.environ``) overridden by the run's ``env``, sorted by name."""
    merged = {**(os.environ if base is None else base), **env}
    return {k: merged[k] for k in sorted(merged) if k.startswith("NCCL_")}


def describe(name: str) -> str:
    """``NAME (A=1 B=2)``: the preset as the pre-flight and docs name it."""
    return f"{name} ({' '.join(f'{k}={v}' for k, v in preset_env(name).items())})"
