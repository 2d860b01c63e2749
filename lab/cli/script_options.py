"""``python -m lab launch --script PATH [--cwd DIR] [--events-dir DIR] -- ARGS``: a user's own
script from the command line.

The options ``launch`` gains for the second kind of run, and what it does
with them: ``--script PATH`` (or ``--module NAME`` for ``python -m NAME``),
``--cwd``, ``--events-dir``, ``--total-steps``, and every argument after the
first ``--`` handed to the script untouched (``split_script_args`` cuts them
off before argparse sees them, so the script's own options never clash with
ours). The shared options (``--mode``, ``--gpus``, ``--nproc``, nodes,
``--name``, ``--tag``, ``--env``, ``--backend`` and the Slurm job's options)
mean what they mean for the trainer; one of
the trainer's own options given with ``--script`` is refused with one line
saying the script's options go after ``--``. ``launch --script --dry-run``
prints what the Launch page shows (a Slurm run's job script too). Reading the values is
``lab.engine.launch.script_form.script_config``, launching ``lab.engine.launch.launcher.launch``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from typing import Any, Sequence

from lab.engine.spec.run import PLACEMENT, trainer_fields

SHARED = PLACEMENT  # what a script run shares with the trainer's; the rest is the trainer's
EPILOG = """a script of your own (instead of the lab's trainer):
  python -m lab launch --script train.py --mode ddp --nproc 2 [--cwd DIR] [--events-dir DIR]
      [--json] -- ARGS...
  everything after -- is handed to the script as it is; single runs `python train.py ARGS`
  with one device visible, dp with every chosen GPU visible (the script wraps its own
  nn.DataParallel), ddp under torchrun. Event files the script creates below --cwd after the
  launch are linked to the run (status --json: events_dirs). --backend slurm (with
  --partition, --gpus-per-node, --time ...) runs it as a Slurm job in --cwd instead."""


SWEEP_EPILOG = """a script of your own in every mode and device count:
  python -m lab sweep --script train.py --modes single,ddp --devices 1,2 [--repeats 3]
      [--cwd DIR] [--json] -- ARGS...
  each run is what launch --script would start (single: one device visible; dp: the first N
  GPUs visible to the script's own nn.DataParallel; ddp: torchrun with N processes); the
  script's batch is its own arguments', so the sweep is strong scaling."""


class ScriptUsageError(Exception):
    """A script launch asked wrongly: one line naming the fix."""


def split_script_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(our arguments, the script's)``: everything after the first ``--`` is the script's."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    i = argv.index("--")
    return argv[:i], argv[i + 1 :]


def add_options(p: argparse.ArgumentParser, launch: bool = True) -> None:
    """``launch``'s (or ``sweep``'s, ``launch=False``) options for a script run."""
    g = p.add_argument_group("your own script (instead of the trainer; its arguments go after --)")
    g.add_argument("--script", metavar="PATH", help="your training script, a .py file")
    g.add_argument(
        "--module", metavar="NAME", help="run `python -m NAME` instead of a file (e.g. mypkg.train)"
    )
    g.add_argument(
        "--cwd", metavar="DIR", help="the working directory (default: the script's folder)"
    )
    g.add_argument(
        "--events-dir",
        metavar="DIR",
        help="a folder the script writes event files to, linked from "
        "the start (those below --cwd are found anyway)",
    )
    g.add_argument(
        "--total-steps",
        type=int,
        metavar="N",
        help="the script's last step, for the ETA (optional)",
    )
    p.epilog = EPILOG if launch else SWEEP_EPILOG
    p.formatter_class = argparse.RawDescriptionHelpFormatter


def wanted(a: argparse.Namespace) -> bool:
    """Whether this launch is of a script (``--script`` or ``--module`` given)."""
    return bool(getattr(a, "script", None) or getattr(a, "module", None))


def _trainer_options_given(a: argparse.Namespace) -> list[str]:
    out = []
    for f in trainer_fields():
        if (
            f.name not in SHARED
            and hasattr(a, f.name)
            and getattr(a, f.name) not in (f.default, None)
        ):
            out.append("--" + f.name.replace("_", "-"))
    return out


def as_flags(message: str) -> str:
    """A script message in the command line's words: the form's ``-m package.module`` is the
    ``--module package.module`` flag here."""
    return re.sub(r"(?<![\w-])-m (package\.module|mypkg\.)", r"--module \1", message)


def values(a: argparse.Namespace) -> dict[str, Any]:
    """The script run's values of the parsed options (a trainer option given is refused)."""
    if a.script and a.module:
        raise ScriptUsageError("give --script PATH or --module NAME, not both")
    trainer = _trainer_options_given(a)
    if trainer:
        raise ScriptUsageError(
            f"{trainer[0]} is an option of the lab's trainer, not of your script: put the "
            f"script's own options after --, e.g. launch --script train.py -- {trainer[0]} ..."
        )
    values = {k: getattr(a, k, None) for k in SHARED}
    values.update(
        script=a.script or f"-m {a.module}",
        args=list(getattr(a, "script_args", []) or []),
        cwd=a.cwd,
        events_dir=a.events_dir,
        total_steps=a.total_steps,
    )
    return values


def launch(a: argparse.Namespace, root, gpu_count: int) -> int:
    """Launch (or with ``--dry-run`` show) the script run the options describe; print its id or
    JSON."""
    from lab.engine import registry
    from lab.engine.devices import nvml as devices
    from lab.engine.launch import launcher, script, script_form
    from lab.views.text import shell_line

    cfg, unreadable = script_form.script_config(values(a), gpu_count)
    if unreadable:
        raise unreadable[0]
    if a.dry_run:
        script.validate(cfg, gpu_count)
        p = script_form.preview(cfg, devices.snapshot(registry.process_owner(root)), root)
        if a.json:
            print(json.dumps(dataclasses.asdict(p), indent=1))
            return 0
        print("\n".join(f"# {line}" for line in p.preflight))
        if p.sbatch:  # a Slurm run: the job script, then the command that submits it
            print(f"# {p.argv[-1]}:\n{p.sbatch}", end="")
        print(shell_line(p.argv, p.env, cwd=p.cwd))
        for i, other in enumerate(p.other_nodes, start=1):
            print(f"# on node {i} (same script, same environment):\n{shell_line(other, cwd=p.cwd)}")
        return 0
    run_id = launcher.launch(
        cfg,
        root,
        exclusive=getattr(a, "exclusive", False),
        wait_for_idle=getattr(a, "wait_for_idle", False),
    )
    rec = registry.get_run(run_id, root)
    if a.json:
        print(
            json.dumps(
                {
                    "run_id": run_id,
                    "state": rec.state,
                    "run_dir": rec.run_dir,
                    "mode": cfg.mode,
                    "kind": rec.kind,
                },
                indent=1,
            )
        )
    else:
        from lab.cli.common import next_commands

        print(f"{run_id} {rec.state} {rec.run_dir}")
        print(next_commands(run_id), file=sys.stderr)
    return 0
