"""NCCL presets: named sets of NCCL environment variables a run can be launched with.

A preset is a lab option (``--nccl-preset NAME``), not the trainer's: its variables land in the
run's environment (``lab.engine.launch.environment``, before the user's own ``--env``, which wins
on a clash) and so in run.json's ``env``; ``config.nccl_preset`` records the name. The sets are
starting points taken from the seeds (the articles the lab is built on), not measured advice:
whether one helps on a given machine is what an A/B run measures. Under gloo (no GPUs) NCCL is
not used, and the pre-flight says the preset has no effect there (``lab.engine.preflight``).
"""

from __future__ import annotations

# name -> (variables, what it is for); docs/cli.md has the same table
PRESETS: dict[str, tuple[dict[str, str], str]] = {
    "single-node-nvlink": (
        {"NCCL_P2P_DISABLE": "0", "NCCL_SHM_DISABLE": "0", "NCCL_IB_DISABLE": "1"},
        "one machine: GPU peer-to-peer and shared memory on, InfiniBand off",
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
        {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,COLL"},
        "NCCL's own log of its set-up and collectives (in the ranks' output)",
    ),
}
NAMES = tuple(PRESETS)


def preset_env(name: str) -> dict[str, str]:
    """The variables of preset ``name`` (none for an empty name)."""
    return dict(PRESETS[name][0]) if name else {}


def preset_problem(name: object) -> str | None:
    """What is wrong with a preset name (one line naming the choices), or None."""
    if name == "" or name in PRESETS:
        return None
    return f"unknown NCCL preset {name!r}: use one of {', '.join(NAMES)} (or none)"


def describe(name: str) -> str:
    """``NAME (A=1 B=2)``: the preset as the pre-flight and docs name it."""
    return f"{name} ({' '.join(f'{k}={v}' for k, v in preset_env(name).items())})"
