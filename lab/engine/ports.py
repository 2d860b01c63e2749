"""A DDP job's rendezvous port: a free TCP port on this machine (each job its own, never a fixed
29500), and torchrun's flag that carries it (the supervisor replaces the value after it when the
port was taken before the job started).
"""

from __future__ import annotations

import socket

PORT_FLAG = "--master-port"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now (the OS picks it by binding port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
