"""What a person asks for (the Launch form, the command line) as a ``RunConfig``, and what is
shown before a launch.

``run_config(values, gpus)`` is the one translation of form or command line values (the fields
of ``lab.engine.launch.form``) into a ``RunConfig``: GPUs as text or a list (default: what the
mode makes sense with, among the usable GPUs ``gpus``, a count or the physical indices NVML could
read), DDP's processes per node (default: one per GPU, ``CPU_DDP_PROCESSES`` on the CPU), the
dataset kind and folder, tags and ``KEY=VALUE`` text; a value that cannot be read comes back as a
``ConfigError`` beside the config (the field left at its default), so a form shows every problem
at once. ``form_values`` is its inverse, the widgets' starting values. ``preview`` is what is
shown before a launch: the pre-flight lines, the command with a placeholder for the port chosen
at the start, the environment it changes, and the other nodes' commands; for a Slurm run
(``backend`` slurm) the Slurm pre-flight lines, the job script and the sbatch command instead.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from lab.engine.devices.nvml import DeviceSnapshot
from lab.engine.launch import backends
from lab.engine.launch.commands import other_node_commands
from lab.engine.launch.form import FOLDER
from lab.engine.launch.trainer_options import IMAGEFOLDER
from lab.engine.preflight.checks import preflight
from lab.engine.spec import modes
from lab.engine.spec.modes import DDP, SINGLE
from lab.engine.spec.run import (
    CPU_DDP_PROCESSES,
    ConfigError,
    Gpus,
    RunConfig,
    trainer_fields,
    usable,
)
from lab.runfolder import REPO_ROOT, root_or_default

# where a shown command has the port the supervisor picks free at the start
PORT_PLACEHOLDER = "<port>"
RUN_ID_PLACEHOLDER = "<run-id>"  # the run folder's name is drawn at the launch


def default_gpus(mode: str, gpus: Gpus) -> tuple[int, ...]:
    """What a mode makes sense with here: none without GPUs, the first usable for single, all for
    dp/ddp."""
    have = usable(gpus)
    return have[:1] if mode == SINGLE else have


def default_nproc(mode: str, gpus: tuple[int, ...]) -> int:
    """Processes per node: ddp and fsdp one per GPU (``CPU_DDP_PROCESSES`` on the CPU); the other
    modes one."""
    return (len(gpus) or CPU_DDP_PROCESSES) if modes.torchrun(mode) else 1


def _gpus(value: str | Iterable[int] | None, mode: str, gpus: Gpus) -> tuple[int, ...]:
    if value is None:
        return default_gpus(mode, gpus)
    if not isinstance(value, str):
        return tuple(value)
    if value.strip().lower() in ("", "cpu", "none"):
        return ()
    try:
        return tuple(int(x) for x in value.split(",") if x.strip())
    except ValueError:
        raise ConfigError(
            "gpus", f"{value!r} is not a list of GPU numbers: use e.g. 0,1, or cpu for none"
        ) from None


def _lines(value: str | Iterable[str]) -> tuple[str, ...]:
    """Text (one item per line) or a list as a tuple; blank lines left out."""
    items = value.splitlines() if isinstance(value, str) else list(value)
    return tuple(
        s.strip() if isinstance(s, str) else s for s in items if not isinstance(s, str) or s.strip()
    )


def _tags(value: str | Iterable[str]) -> tuple[str, ...]:
    items = re.split(r"[,\s]+", value.strip()) if isinstance(value, str) else list(value)
    return tuple(dict.fromkeys(t for t in items if t))  # in order, each once


def _env(value: str | Iterable[str] | Mapping[str, str]) -> dict[str, str]:
    if isinstance(value, Mapping):
        return dict(value)
    out: dict[str, str] = {}
    for item in value.splitlines() if isinstance(value, str) else value:
        if not item.strip() or item.strip().startswith("#"):
            continue
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                "extra_env", f"{item.strip()!r} is not KEY=VALUE: use e.g. NCCL_DEBUG=INFO"
            )
        out[key.strip()] = val.strip()  # the key itself is checked by config.problems
    return out


def _dataset(kind: str, folder: str | None) -> str:
    return f"{IMAGEFOLDER}:{folder.strip()}" if kind == IMAGEFOLDER and folder is not None else kind


def run_config(values: Mapping[str, Any], gpus: Gpus) -> tuple[RunConfig, list[ConfigError]]:
    """A ``RunConfig`` from form or command-line values, and the values that could not be read.

    ``values`` maps RunConfig field names (and ``dataset_folder``) to what was
    given; a missing or None value takes its default. Nothing is validated
    beyond reading: ``config.problems`` does that.
    """
    given = {k: v for k, v in values.items() if v is not None}
    errors: list[ConfigError] = []
    kw = {f.name: given[f.name] for f in trainer_fields() if f.name in given}
    mode = kw.get("mode", RunConfig.mode)
    # a Slurm job's GPUs are its nodes'
    local_gpus = gpus if backends.named(kw.get("backend")).runs_here else 0
    try:
        kw["gpus"] = _gpus(given.get("gpus"), mode, local_gpus)
    except ConfigError as e:
        errors.append(e)
        kw["gpus"] = default_gpus(mode, local_gpus)
    g = kw.get("gpus_per_node", 0)
    # ddp: one process each
    node_gpus = kw["gpus"] or (tuple(range(g)) if isinstance(g, int) and g > 0 else ())
    kw.setdefault("nproc", default_nproc(mode, node_gpus))
    kw["dataset"] = _dataset(kw.get("dataset", RunConfig.dataset), given.get(FOLDER))
    kw["tags"] = _tags(kw.get("tags", ()))
    kw["sbatch_args"] = _lines(kw.get("sbatch_args", ()))
    try:
        kw["extra_env"] = _env(kw.get("extra_env", {}))
    except ConfigError as e:
        errors.append(e)
        kw["extra_env"] = {}
    for name in (
        "name",
        "rdzv_endpoint",
        "profile_steps",
        "partition",
        "time",
        "account",
        "resume",
    ):
        if isinstance(kw.get(name), str):
            kw[name] = kw[name].strip()
    return RunConfig(**kw), errors


def form_values(config: RunConfig) -> dict[str, Any]:
    """The form's starting values for ``config``: through ``run_config`` they give it back, once the
    disabled widgets' values are left out (``FormField.enabled``), as the page does."""
    out = {f.name: getattr(config, f.name) for f in trainer_fields()}
    kind, _, folder = (
        config.dataset.partition(":")
        if config.dataset.startswith(f"{IMAGEFOLDER}:")
        else (config.dataset, "", "")
    )
    out.update(
        dataset=kind,
        dataset_folder=folder,
        tags=", ".join(config.tags),
        extra_env="\n".join(f"{k}={v}" for k, v in config.extra_env.items()),
        sbatch_args="\n".join(config.sbatch_args),
    )
    # disabled then; it takes input for ddp on the CPU only (one per GPU otherwise)
    if not modes.torchrun(config.mode):
        out["nproc"] = default_nproc(DDP, ())
    return out


@dataclass(frozen=True)
class Preview:
    """What is shown before a launch: run it in ``cwd`` with ``env`` added (only what differs from
    now)."""

    preflight: list[str]
    argv: list[str]
    env: dict[str, str]
    other_nodes: list[list[str]]
    cwd: str
    sbatch: str = ""  # a Slurm run: the job script argv submits


def preview(
    config: RunConfig, snapshot: DeviceSnapshot, runs_root: Path | str | None = None
) -> Preview:
    """The pre-flight lines, the command (port and run id as placeholders), its environment, the
    other nodes'."""
    run_dir = root_or_default(runs_root) / RUN_ID_PLACEHOLDER
    argv, env = backends.build_command(config, run_dir, PORT_PLACEHOLDER)
    changed = {k: v for k, v in sorted(env.items()) if os.environ.get(k) != v}
    b = backends.of(config)  # its lines (this machine's devices, or the Slurm job's), its script
    return Preview(
        b.lines(config, run_dir.parent, lambda: preflight(config, snapshot)),
        argv,
        changed,
        other_node_commands(config, run_dir),
        str(REPO_ROOT),
        b.job_script(config, run_dir),
    )
