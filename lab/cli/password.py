"""``python -m lab password``: print a salted hash of a password typed at a prompt, for
``LAB_PASSWORD_HASH`` (lab.engine.launch.password)."""

from __future__ import annotations

import argparse
import getpass

from lab.cli.common import UserError


def cmd_password(a: argparse.Namespace) -> int:
    from lab.engine.launch.password import HASH_ENV, make_hash

    first = getpass.getpass("Password: ")
    if not first:
        raise UserError("the password is empty: type at least one character")
    if getpass.getpass("Again: ") != first:
        raise UserError("the two passwords differ: run `python -m lab password` again")
    value = make_hash(first)
    print(value)
    print(f"# start the dashboard with {HASH_ENV}='{value}' in its environment")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("password", help="print a hash for LAB_PASSWORD_HASH")
    p.set_defaults(func=cmd_password)
