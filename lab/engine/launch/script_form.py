"""A script run as a person asks for it (the Launch form's "My script", ``launch --script``), and
what is shown first.

``SCRIPT_FIELDS`` is the form of a script run as a table, drawn by the Launch page like
``form.FIELDS``: the script (a ``.py`` path or ``-m package.module``), its arguments (one line,
split with shell quoting rules), the working directory, an optional folder of event files and an
optional total of steps, then the fields a script run shares with a trainer run (where to run and
the Slurm job's options, mode, GPUs, processes, name, tags, environment, nodes), under keys of their
own. ``script_config(values, gpu_count)`` reads form or command-line values into a script run's
``RunConfig``
(``form_values`` is its inverse): the shared fields through ``request.run_config`` (the same
defaults: GPUs by mode, one DDP process per GPU or two on the CPU), a value that cannot be read
coming back as a ``ConfigError`` beside it. ``preview`` is what is shown before a launch:
plain-words lines about what will run and where its curves will be found, the command (port and run
id as placeholders) and the environment it changes; with "Where to run: slurm" (the form's first
fields, as the trainer's) Slurm's lines, the job script and the sbatch command."""

from __future__ import annotations

import dataclasses
import os
import shlex
from pathlib import Path
from typing import Any, Mapping

from lab.engine.devices.nvml import DeviceSnapshot
from lab.engine.launch import backends, form, request
from lab.engine.launch.commands import other_node_commands
from lab.engine.launch.environment import TB_ENV
from lab.engine.launch.form import FormField
from lab.engine.launch.request import PORT_PLACEHOLDER, RUN_ID_PLACEHOLDER, Preview
from lab.engine.launch.script import normalized
from lab.engine.spec.modes import SCRIPT_MODES
from lab.engine.spec.run import JOB_FIELDS, PLACEMENT, ConfigError, RunConfig
from lab.engine.supervise.linked import MAX_DEPTH
from lab.runfolder import SCRIPT, root_or_default

_SHARED = tuple(k for k in PLACEMENT if k != "mode")  # the mode is read on its own


def _shared(name: str) -> FormField:
    """The trainer form's field under a key of the script form's own."""
    f = form.BY_NAME[name]
    return dataclasses.replace(f, key=f.key.replace("launch_", "launch_script_", 1))


SCRIPT_FIELDS: tuple[FormField, ...] = (  # as form.FIELDS: a field's only_if names one above it
    *(_shared(n) for n in ("backend", *JOB_FIELDS)),  # where to run: this machine, or a Slurm job
    FormField(
        "script",
        "Script: a .py file, or -m package.module",
        "text",
        "launch_script_path",
        help="Your own training script, unchanged: e.g. examples/ddp_digits.py, or -m mypkg.train",
    ),
    FormField(
        "args",
        "Its arguments",
        "text",
        "launch_script_args",
        help="As you would type them after the script, e.g. --epochs 3 --lr 0.1 (shell quoting "
        "rules)",
    ),
    FormField(
        "cwd",
        "Working directory (empty: the script's folder)",
        "text",
        "launch_script_cwd",
        help="The script runs here; event files it creates below this folder are found and linked",
    ),
    FormField(
        "mode",
        "Mode",
        "radio",
        "launch_script_mode",
        options=SCRIPT_MODES,
        option_labels=(
            "single — python script.py, one device visible",
            "dp — python script.py with the chosen GPUs visible (the script wraps its own "
            "nn.DataParallel)",
            "ddp — torchrun --nproc-per-node N script.py (a torchrun-ready script: DDP, or one "
            "that shards itself with FSDP)",
        ),
    ),
    *(_shared(n) for n in ("gpus", "nproc")),
    FormField(
        "events_dir",
        "Event files folder (optional)",
        "text",
        "launch_script_events",
        help="Where the script writes TensorBoard event files, when not below the working "
        "directory",
    ),
    FormField(
        "total_steps",
        "Total steps (optional, 0 = unknown)",
        "int",
        "launch_script_total",
        help="Only for the ETA: the step the script's last logged event will have",
    ),
    *(
        _shared(n)
        for n in (
            "name",
            "tags",
            "extra_env",
            "nnodes",
            "node_rank",
            "rdzv_endpoint",
            "stall_after",
            "nccl_preset",
        )
    ),
)
SCRIPT_BY_NAME = {f.name: f for f in SCRIPT_FIELDS}


def _args(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, str):
        return tuple(str(v) for v in value)
    try:
        return tuple(shlex.split(value))
    except ValueError as e:  # an open quote
        raise ConfigError("args", f"cannot split the arguments ({e}): close the quote") from None


def script_config(values: Mapping[str, Any], gpu_count: int) -> tuple[RunConfig, list[ConfigError]]:
    """A script run's ``RunConfig`` from form or command-line values, and the values that could
    not be read."""
    given = {k: v for k, v in values.items() if v is not None}
    mode = given.get("mode", "single")
    shared, errors = request.run_config(
        {k: given.get(k) for k in _SHARED} | {"mode": mode}, gpu_count
    )
    kw: dict[str, Any] = {k: getattr(shared, k) for k in _SHARED}
    try:
        kw["args"] = _args(given.get("args"))
    except ConfigError as e:
        errors.append(e)
    for k in ("script", "cwd", "events_dir"):
        if isinstance(given.get(k), str):
            kw[k] = given[k].strip()
    if "total_steps" in given:
        kw["total_steps"] = given["total_steps"]
    return RunConfig(kind=SCRIPT, mode=mode, **kw), errors


def form_values(config: RunConfig) -> dict[str, Any]:
    """The form's starting values for ``config`` (its inverse, as ``request.form_values`` is the
    trainer's)."""
    shared = request.form_values(
        RunConfig(mode=config.mode, **{k: getattr(config, k) for k in _SHARED})
    )
    out = {k: shared[k] for k in (*_SHARED, "mode")}
    out.update(
        script=config.script,
        args=shlex.join(config.args),
        cwd=config.cwd,
        events_dir=config.events_dir,
        total_steps=config.total_steps,
    )
    return out


def _what_runs(c: RunConfig, snapshot: DeviceSnapshot) -> list[str]:
    names = {g.index: g.name for g in getattr(snapshot, "gpus", ())}
    devices = ", ".join(f"GPU {g} ({names.get(g, 'unknown')})" for g in c.gpus) or "none: the CPU"
    visible = ",".join(map(str, c.gpus))
    out = [
        f"Visible GPUs: {devices} (CUDA_VISIBLE_DEVICES={visible!r}; the script counts them from "
        "cuda:0)."
    ]
    if c.mode == "single":
        out.append("One process runs the script as it is.")
    elif c.mode == "dp":
        out.append(
            "One process runs the script; it wraps its model in nn.DataParallel itself"
            + (
                " (with fewer than two GPUs visible it has nothing to split)."
                if len(c.gpus) < 2
                else "."
            )
        )
    else:
        where = "one per GPU, nccl" if c.gpus else "on the CPU, gloo"
        out.append(
            f"torchrun starts {c.nproc * c.nnodes} processes ({where}); each reads RANK, "
            "LOCAL_RANK and "
            "WORLD_SIZE from its environment. A free port is chosen for this job when it starts."
        )
        out.append(
            "Put @record (torch.distributed.elastic.multiprocessing.errors) on the script's main: "
            "a rank "
            "that raises then leaves its traceback where the diagnosis reads it."
        )
    return out


def _curves(c: RunConfig) -> list[str]:
    where = c.cwd or "the script's folder"
    out = [
        f"Curves: event files the script creates below {where} after the launch (SummaryWriter() "
        "writes "
        f"./runs/<date>_<host>) are found and linked, {MAX_DEPTH} folders deep at most; {TB_ENV} "
        "names "
        "the run's own tb/ for scripts that read it."
    ]
    if c.events_dir:
        out.append(f"Also linked from the start: {c.events_dir}.")
    return out


def preview(
    config: RunConfig, snapshot: DeviceSnapshot, runs_root: Path | str | None = None
) -> Preview:
    """The plain-words lines, the command (port and run id as placeholders), its environment, the
    other nodes'."""
    c = normalized(config)
    run_dir = root_or_default(runs_root) / RUN_ID_PLACEHOLDER
    argv, env = backends.build_command(c, run_dir, PORT_PLACEHOLDER)
    changed = {
        k: v
        for k, v in sorted(env.items())
        if os.environ.get(k) != v
        # "" = none, as before
        and not (k == "PYTHONPATH" and v == "" and k not in os.environ)
    }
    b = backends.of(c)  # its lines (this machine's, or the Slurm job's), then its job script
    return Preview(
        b.lines(c, run_dir.parent, lambda: _what_runs(c, snapshot))
        + _curves(c)
        + [f"Warning: {w}." for w in b.warnings(c)],
        argv,
        changed,
        other_node_commands(c, run_dir),
        c.cwd,
        b.job_script(c, run_dir),
    )


# the Launch page's layout of a script run, as ``form.LAYOUT`` is a trainer run's
LAYOUT: list[tuple[str | None, list[list[str | tuple[str, ...]]]]] = [
    *form.LAYOUT[:2],  # where to run, and the Slurm job's options
    (
        None,
        [
            ["script"],
            ["args"],
            ["cwd"],
            ["mode"],
            ["gpus"],
            ["nproc"],
            ["events_dir", "total_steps"],
            ["name", "tags"],
        ],
    ),
    ("More options", [["stall_after", "nccl_preset"], ["extra_env"]]),
    ("Several machines (DDP over nodes)", [["nnodes", "node_rank", "rdzv_endpoint"]]),
]
