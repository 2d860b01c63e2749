"""The command line, ``python -m lab SUBCOMMAND``: one module per subcommand, each adding its parser
and its function; ``run_options`` and ``script_options`` are the run flags ``launch`` and ``sweep``
share. Any error is one line on stderr and exit code 2, never a traceback (``main``)."""

from __future__ import annotations

import argparse
import logging
import sys

from lab.cli import (
    compare,
    gpus,
    launch,
    linkcheck,
    logs,
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
    rm,
    resume,
    stacks,
    scalars,
    password,
)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m lab", description="Parallel Training Lab: launch and watch runs."
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
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
    args = build_parser().parse_args(ours)
    args.script_args = script_args
    try:
        _adopt_orphans()
        return int(args.func(args) or 0)
    except ConfigError as e:  # named as the flag the user typed
        print(
            f"error: {run_options.flag_name(e.field)}: {e.message}",
            file=sys.stderr,
        )
    except (
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


def _adopt_orphans() -> None:
    """A run whose supervisor died while its processes live gets a new watcher (issue 24)."""
    from lab.cli.common import root
    from lab.engine.supervise.adopt import adopt_orphans

    try:
        adopt_orphans(root())
    except OSError as e:  # never in the way of the command itself
        logging.getLogger(__name__).warning("could not adopt orphaned runs: %s", e)
