"""The command line's parser: argparse, except that a bad command line is one line naming the fix.

argparse's own ``error`` prints the whole usage and then the problem; ``LabParser.error`` raises
``UsageError`` instead, whose text is the problem, a hint for the near misses users make (several
modes given to ``launch``, ``--mode`` given to ``sweep``, no command at all) and where the help is.
``main`` prints it as one line with exit code 2. ``PROG`` is how the user called us: ``lab`` (the
installed command) or ``python -m lab``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import NoReturn


class UsageError(Exception):
    """A command line argparse could not read: printed as one line, exit 2."""


def prog() -> str:
    """``lab`` when started as the installed command, else ``python -m lab``."""
    return "lab" if os.path.basename(sys.argv[0] or "") == "lab" else "python -m lab"


PROG = prog()

# (command, pattern of argparse's message) -> what to do instead
_HINTS: tuple[tuple[str, str, str], ...] = (
    (
        "",
        r"required: (cmd|COMMAND)",
        "give a command, e.g. `{prog} status` or `{prog} launch --mode ddp`",
    ),
    (
        "launch",
        r"unrecognized arguments: --modes?\b|--modes",
        "launch starts one run of one --mode; to run several modes use "
        "`{prog} sweep --modes single,ddp`",
    ),
    (
        "sweep",
        r"ambiguous option: --mode\b|unrecognized arguments: --mode\b",
        "sweep takes --modes, a comma list: e.g. --modes ddp or --modes single,ddp",
    ),
)


def hint(command: str, message: str) -> str:
    """What to do instead, for the near misses ``_HINTS`` knows; else empty."""
    for cmd, pattern, words in _HINTS:
        if cmd in ("", command) and re.search(pattern, message):
            return words.format(prog=PROG)
    return ""


def one_line(command: str, message: str) -> str:
    """argparse's ``message`` as one line: the problem, a hint, and where the help is."""
    where = f"{PROG} {command}".strip()
    text = message.replace("\n", " ").strip()
    helped = hint(command, text)
    return f"{where}: {text}" + (f"; {helped}" if helped else f" (see {where} --help)")


class LabParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors raise ``UsageError`` (one line) instead of printing the
    usage; its subcommands' parsers are LabParsers too (argparse makes them of the parent's
    class)."""

    def error(self, message: str) -> NoReturn:
        command = self.prog[len(PROG) :].strip() if self.prog.startswith(PROG) else ""
        command = command or getattr(self, "given", "")
        raise UsageError(one_line(command, message))


def lower(text: str) -> str:
    """An argparse ``type`` for case-insensitive choices (``--mode DDP`` is ``ddp``)."""
    return text.strip().lower()
