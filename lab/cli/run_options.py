"""The run options of ``python -m lab launch`` and ``sweep``: one flag per ``RunConfig`` field.

Defaults come from ``RunConfig``, flags and help from the option's declaration
(``lab.engine.launch.form``), so the command line cannot drift from the form;
parsed values become a config through ``lab.engine.launch.request.run_config``, as
the Launch page's form does.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from lab.engine.launch.form import BY_NAME
from lab.engine.launch.trainer_options import CHECKPOINTS
from lab.engine.spec.run import BACKENDS, MODES, RunConfig

# the options the command line restricts to a list (the form's dataset options are kinds, not
# values: imagefolder:PATH)
CHOICES = {"mode": MODES, "checkpoint": CHECKPOINTS, "backend": BACKENDS}


def flag_name(field: str) -> str:
    """How an error names a config field: as the flag the user typed, without its dashes."""
    declared = BY_NAME.get(field)
    return ((declared.flag if declared else "") or field).replace("_", "-")


def add_run_options(p: argparse.ArgumentParser, with_mode: bool = True) -> None:
    """A flag per RunConfig field (its default and choices), and ``--json``."""
    for f in dataclasses.fields(RunConfig):
        if f.name == "mode" and not with_mode:
            continue
        declared = BY_NAME[f.name]
        flag = declared.cli_flag()
        kw: dict[str, Any] = dict(dest=f.name, help=declared.cli_words())
        if declared.flag:  # a list: one item per flag
            p.add_argument(flag, action="append", default=[], metavar=declared.flag.upper(), **kw)
        elif f.name in ("gpus", "nproc"):  # None: the mode's default, chosen by request.run_config
            p.add_argument(flag, type=int if f.name == "nproc" else str, **kw)
        elif isinstance(f.default, bool):
            p.add_argument(flag, action="store_true", **kw)
        else:
            p.add_argument(
                flag, type=type(f.default), default=f.default, choices=CHOICES.get(f.name), **kw
            )
    p.add_argument("--json", action="store_true", help="print JSON")


def run_config(a: argparse.Namespace, mode: str, usable: tuple[int, ...]) -> RunConfig:
    """The parsed flags as a RunConfig of ``mode``, read as the Launch form's values are; a bad one
    raises."""
    from lab.engine.launch import request

    values = {
        f.name: getattr(a, f.name) for f in dataclasses.fields(RunConfig) if hasattr(a, f.name)
    }
    config, unreadable = request.run_config(dict(values, mode=mode), usable)
    if unreadable:
        raise unreadable[0]
    return config
