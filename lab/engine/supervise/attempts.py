"""A run's attempts to start on a free port: a DDP run's recorded ``--master-port`` may be taken by
the time it starts (``fresh_port``), and a failed attempt's logs are kept under other names
(``set_aside_attempt``). Used by the supervisor; tested by tests/test_engine_runs.py."""

from __future__ import annotations

import socket
from pathlib import Path

from lab.engine import ports
from lab.engine.ports import PORT_FLAG
from lab.runfolder import ERROR_JSON, LOGS_DIR, STDOUT_LOG


def fresh_port(argv: list[str], force: bool = False) -> tuple[list[str], int | None]:
    """argv with ``--master-port`` set to a port free right now (the recorded one may be taken
    since)."""
    if PORT_FLAG not in argv:
        return argv, None
    i = argv.index(PORT_FLAG) + 1
    port = int(argv[i])
    try:
        if force:
            raise OSError("a new port was asked for")
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
    except OSError:
        port = ports.free_port()
    return argv[:i] + [str(port)] + argv[i + 1 :], port


def set_aside_attempt(run_dir: Path, n: int) -> None:
    """Keep a failed attempt's logs under other names so the diagnosis reads the new attempt."""
    for name in (STDOUT_LOG, LOGS_DIR, ERROR_JSON):
        p = run_dir / name
        if p.exists():
            p.rename(run_dir / f"{name}.port-retry-{n}")
