"""Who may launch from the pages: launching is running code on this machine.

The dashboard listens on 127.0.0.1 (``.streamlit/config.toml``), so only
this machine reaches it. When it has been set to listen on any other
address (``--server.address 0.0.0.0``, a LAN address, or no address at all,
which Streamlit takes as every interface), anyone who reaches the page could
start a process here: every launch from the pages (a trainer run, a script,
the "Compare modes" sweep) is refused then, unless ``LAB_ALLOW_REMOTE_LAUNCH=1``
is set in the server's environment, or the pages ask for a password
(``LAB_PASSWORD_HASH``, ``lab.engine.launch.password``): whoever passed the
password may launch. ``launch_access(server_address)`` decides;
the pages read the address from Streamlit's config and pass it in, so the
rule is tested without a browser. The command line is not concerned: whoever
types ``python -m lab launch`` is on the machine already.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from lab.engine.launch.password import HASH_ENV

ALLOW_ENV = "LAB_ALLOW_REMOTE_LAUNCH"
LOOPBACK_NAMES = ("localhost", "::1", "[::1]")


@dataclass(frozen=True)
class LaunchAccess:
    """Whether the pages may launch; ``message`` says why not, or warns that other machines may."""

    allowed: bool
    message: str | None


def is_loopback(address: str | None) -> bool:
    """True for 127.0.0.0/8, ``localhost`` and ``::1``; None or "" means every interface, so
    False."""
    a = (address or "").strip().lower()
    return a in LOOPBACK_NAMES or a.startswith("127.")


def launch_access(server_address: str | None, env: Mapping[str, str] | None = None) -> LaunchAccess:
    """May the pages of a server listening on ``server_address`` launch runs?"""
    env = os.environ if env is None else env
    if is_loopback(server_address):
        return LaunchAccess(True, None)
    where = (
        server_address.strip()
        if server_address and server_address.strip()
        else "every network interface"
    )
    if (env.get(HASH_ENV) or "").strip():  # the pages ask for the password first (ui.gate)
        return LaunchAccess(
            True,
            f"This server listens on {where}; {HASH_ENV} is set, so every page asks for the "
            "password and whoever knows it can launch runs.",
        )
    if env.get(ALLOW_ENV) == "1":
        return LaunchAccess(
            True,
            f"This server listens on {where} and {ALLOW_ENV}=1 is set: anyone who can reach "
            "this page can launch runs, that is run code on this machine.",
        )
    return LaunchAccess(
        False,
        f"Launching from the page is off: this server listens on {where}, so other machines "
        "can reach it, and a launch runs code on this machine. Restart it on 127.0.0.1 "
        "(streamlit run app.py --server.address 127.0.0.1, as .streamlit/config.toml sets), "
        f"or set {ALLOW_ENV}=1 in its environment to allow launches from anywhere.",
    )
