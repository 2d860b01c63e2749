"""Free TCP ports on this machine, for a DDP job's rendezvous (each job its own, never a fixed
29500).
"""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now (the OS picks it by binding port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
