"""The command line, ``python -m lab SUBCOMMAND``: one module per subcommand, each adding its parser
and its function; ``run_options`` and ``script_options`` are the run flags ``launch`` and ``sweep``
share. Any error is one line on stderr and exit code 2, never a traceback (``main``)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from lab.cli import (
    compare,
    gpus,
    launch,
    linkcheck,
    logs,
    models,
    noise,
    password,
    queue,
    resume,
    rm,
    run_options,
    scalars,
    script_options,
    stacks,
    status,
    stop,
    sweep,
)
from lab.cli.common import UserError
from lab.cli.parser import PROG, LabParser, UsageError

# in the order --help lists them
SUBCOMMANDS = (
    launch,
    sweep,
    status,
    stop,
    queue,
    logs,
    gpus,
    linkcheck,
    compare,
    noise,
    models,
    rm,
    resume,
    stacks,
    scalars,
    password,
)


EXAMPLES = """examples:
  {prog} launch --mode ddp --nproc 2 --epochs 2    one run in the background; prints its id
  {prog} status                                   every run (a sweep's runs under its id)
  {prog} logs RUN --follow                        a run's output as it comes
  {prog} sweep --modes single,ddp --repeats 3     the modes taking turns, 3 times each
  {prog} compare SWEEP                            is ddp faster here, and by how much
  {prog} launch --script ./train.py --mode ddp --nproc 2 -- --epochs 5   your own script
  {prog} COMMAND --help                           a command's options, with defaults
runs live in the repository's runs/ folder unless LAB_RUNS_DIR names another (docs/cli.md)"""


def build_parser() -> LabParser:
    ap = LabParser(
        prog=PROG,
        description="Parallel Training Lab: launch, watch and compare training runs.",
        epilog=EXAMPLES.format(prog=PROG),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for command in SUBCOMMANDS:
        command.add_parser(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    from lab.engine.launch.launcher import LaunchError
    from lab.engine.launch.resume import ResumeError
    from lab.engine.registry import RunIsLive, RunNotFound
    from lab.engine.spec.run import ConfigError
    from lab.runfolder import BadRunId

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # after --
    ours, script_args = script_options.split_script_args(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        # argparse reports a stray flag from the top parser: name the subcommand it came with (the
        # top parser takes no other word, so the first word is the subcommand)
        parser.given = next((t for t in ours if not t.startswith("-")), "")
        args = parser.parse_args(ours)
        args.script_args = script_args
        _adopt_orphans()
        _names_to_ids(args)
        return int(args.func(args) or 0)
    except BrokenPipeError:  # `lab status | head`: the reader left; end quietly, as cat does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the exit's flush must not raise again
        return 0
    except ConfigError as e:  # named as the flag the user typed
        print(
            f"error: {run_options.flag_name(e.field)}: {script_options.as_flags(e.message)}",
            file=sys.stderr,
        )
    except (
        UsageError,
        UserError,
        script_options.ScriptUsageError,
        LaunchError,
        BadRunId,
        RunIsLive,
        RunNotFound,
        KeyError,
        OSError,
        ResumeError,
    ) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"error: {msg}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    return 2


def _names_to_ids(args) -> None:
    """A run named by its ``--name`` (where that name is unique) means its run id, in every
    command that takes a run."""
    from lab.cli.common import root
    from lab.engine.registry import run_id_of

    if isinstance(getattr(args, "run", None), str):
        args.run = run_id_of(args.run, root())
    if isinstance(getattr(args, "runs", None), list):
        args.runs = [x if "/" in x else run_id_of(x, root()) for x in args.runs]
    if isinstance(getattr(args, "baseline", None), str):
        args.baseline = run_id_of(args.baseline, root())


def _adopt_orphans() -> None:
    """A run whose supervisor died while its processes live gets a new watcher (issue 24)."""
    from lab.cli.common import root
    from lab.engine.supervise.adopt import adopt_orphans

    try:
        adopt_orphans(root())
    except OSError as e:  # never in the way of the command itself
        logging.getLogger(__name__).warning("could not adopt orphaned runs: %s", e)
