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

from lab.cli.parser import lower
from lab.engine.launch.form import BY_NAME, LAYOUT
from lab.engine.spec.run import RunConfig, trainer_fields

# the options the command line restricts to a list, the form's (the trainer's, for its options;
# the form's dataset options are kinds, not values: imagefolder:PATH)
CHOICES = {name: BY_NAME[name].options for name in ("mode", "checkpoint", "backend")}


def flag_name(field: str) -> str:
    """How an error names a config field: as the flag the user typed, without its dashes."""
    declared = BY_NAME.get(field)
    return ((declared.flag if declared else "") or field).replace("_", "-")


def _sections() -> dict[str, str]:
    """field -> the title of its section of ``--help``: the Launch form's sections."""
    out = {}
    for title, rows in LAYOUT:
        for row in rows:
            for column in row:
                for name in column if isinstance(column, tuple) else (column,):
                    out[name] = title or WHAT_TO_RUN
    return out


WHAT_TO_RUN = "what to run, and where"


def _words(declared: Any, default: Any) -> str:
    """The flag's sentence, and its default where it has one worth saying (argparse's %-format:
    a literal percent sign is doubled)."""
    words = declared.cli_words().replace("%", "%%")
    empty = default is None or default is False or default in ("", [], ())
    if empty or "default" in words:
        return words
    return f"{words} (default: {default})"


def add_run_options(p: argparse.ArgumentParser, with_mode: bool = True) -> None:
    """A flag per RunConfig field (its sentence, default and choices) in the Launch form's
    sections, and ``--json``."""
    sections, groups = _sections(), {}
    for f in trainer_fields():
        if f.name == "mode" and not with_mode:
            continue
        declared = BY_NAME[f.name]
        flag = declared.cli_flag()
        title = sections.get(f.name, WHAT_TO_RUN)
        group = groups.get(title) or groups.setdefault(title, p.add_argument_group(title))
        default = f.default if f.default is not dataclasses.MISSING else None
        kw: dict[str, Any] = dict(dest=f.name, help=_words(declared, default))
        if declared.flag:  # a list: one item per flag
            metavar = declared.flag.upper()
            group.add_argument(flag, action="append", default=[], metavar=metavar, **kw)
        elif f.name in ("gpus", "nproc"):  # None: the mode's default, chosen by request.run_config
            group.add_argument(flag, type=int if f.name == "nproc" else str, **kw)
        elif isinstance(f.default, bool):
            group.add_argument(flag, action="store_true", **kw)
        else:
            choices = CHOICES.get(f.name)
            kind = lower if choices else type(f.default)  # --mode DDP is ddp
            group.add_argument(flag, type=kind, default=f.default, choices=choices, **kw)
    p.add_argument(
        "--json", action="store_true", help="print JSON instead of text (keys: docs/contracts.md)"
    )


def run_config(a: argparse.Namespace, mode: str, usable: tuple[int, ...]) -> RunConfig:
    """The parsed flags as a RunConfig of ``mode``, read as the Launch form's values are; a bad one
    raises."""
    from lab.engine.launch import request

    values = {f.name: getattr(a, f.name) for f in trainer_fields() if hasattr(a, f.name)}
    config, unreadable = request.run_config(dict(values, mode=mode), usable)
    if unreadable:
        raise unreadable[0]
    return config
