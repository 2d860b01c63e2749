"""The shared-server password: ``LAB_PASSWORD_HASH`` and how a typed password is checked.

A GPU server in a rack, opened from a laptop, is the common case. When the
server's environment holds ``LAB_PASSWORD_HASH`` (a salted PBKDF2-SHA256 hash,
``pbkdf2_sha256$<iterations>$<salt hex>$<hash hex>``, as ``python -m lab password``
prints it), every page asks for the password before showing anything
(``ui.gate``), and launching from a non-loopback address is then allowed
without ``LAB_ALLOW_REMOTE_LAUNCH`` (``lab.engine.launch.access``). The check
is constant-time (``hmac.compare_digest``); the pages wait ``failure_delay_s``
after each wrong try.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Mapping

HASH_ENV = "LAB_PASSWORD_HASH"
SCHEME = "pbkdf2_sha256"
ITERATIONS = 200_000
MAX_DELAY_S = 5.0


class BadPasswordHash(ValueError):
    """``LAB_PASSWORD_HASH`` is set but is not a hash ``python -m lab password`` printed."""


def make_hash(password: str, iterations: int = ITERATIONS, salt: bytes | None = None) -> str:
    """A salted hash of ``password`` for ``LAB_PASSWORD_HASH``."""
    if not password:
        raise ValueError("the password is empty: type at least one character")
    salt = os.urandom(16) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
    return f"{SCHEME}${iterations}${salt.hex()}${digest.hex()}"


def _parse(stored: str) -> tuple[int, bytes, bytes]:
    try:
        scheme, iterations, salt, digest = stored.strip().split("$")
        if scheme != SCHEME or int(iterations) < 1:
            raise ValueError
        return int(iterations), bytes.fromhex(salt), bytes.fromhex(digest)
    except ValueError:
        raise BadPasswordHash(
            f"{HASH_ENV} is not a password hash: make one with `python -m lab password`"
        ) from None


def verify(password: str, stored: str) -> bool:
    """Does ``password`` match the hash ``stored``? Constant-time in the digest compare."""
    iterations, salt, digest = _parse(stored)
    got = hashlib.pbkdf2_hmac("sha256", (password or "").encode("utf-8"), salt, iterations)
    return hmac.compare_digest(got, digest)


def configured_hash(env: Mapping[str, str] | None = None) -> str | None:
    """The hash in ``LAB_PASSWORD_HASH`` (checked for shape), None when unset or empty."""
    env = os.environ if env is None else env
    stored = (env.get(HASH_ENV) or "").strip()
    if not stored:
        return None
    _parse(stored)
    return stored


def failure_delay_s(failures: int) -> float:
    """Seconds to wait after the ``failures``-th wrong password in a row: 1, 2, 4, ... capped."""
    return 0.0 if failures <= 0 else min(MAX_DELAY_S, 2.0 ** (failures - 1))
