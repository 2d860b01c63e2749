"""``python -m lab models [NAME]``: every model the trainer takes (``tinycnn``, then torchvision's
classification models), or, for a name, whether it is one and the closest if not."""

from __future__ import annotations

import argparse

from lab.cli.common import UserError, print_json


def cmd_models(a: argparse.Namespace) -> int:
    from lab.engine.launch import models

    if a.name:
        problem = models.model_problem(a.name)
        if problem:
            raise UserError(problem)
        need, exact = models.image_size_need(a.name)
        size = f"exactly {need}x{need}" if exact else f"at least {need}x{need}"
        print(f"{a.name}: takes images of {size} (--image-size)")
        return 0
    names = list(models.names())
    print_json(names) if a.json else print("\n".join(names))
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("models", help="list the models --model takes, or check one name")
    p.add_argument("name", nargs="?", help="check one name: its image size, or the closest names")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_models)
