"""The trainer's models as the launcher sees them: their names and the image size each needs.

The trainer takes its own models (``tinycnn``, ``tinyvit``, ``tinyconvnext``) or any name of
``torchvision.models.list_models(module=torchvision.models)`` (docs/contracts.md
section 1); the names and sizes are the trainer's own torch-free facts
(``training.model_names``), so that a config is refused before anything starts, with the size
named, rather than by the trainer a few seconds later. ``names()`` lists them (the trainer's own
first, the order of the Launch page's select); ``image_size_need(name)`` is
``(smallest side, only that size)``. torchvision, and so torch, is imported on the first question
about a model not the trainer's own, and the answers are kept for the process.
"""

from __future__ import annotations

import difflib

from training.model_names import OWN, input_size, names

# where the other names come from
SOURCE = "torchvision.models.list_models(module=torchvision.models)"


def known(name: str) -> bool:
    """Whether the trainer takes ``name`` (its own models answer without importing
    torchvision)."""
    return name in OWN or (isinstance(name, str) and name in names())


image_size_need = input_size  # the trainer's own facts (training.model_names)


def model_problem(name: str) -> str | None:
    """The message for a model the trainer does not take, else None."""
    if known(name):
        return None
    close = suggestions(name)
    if close:
        guess = " or ".join(close)
        return f"unknown model {name!r}: did you mean {guess}? (`lab models` lists all)"
    return (
        f"unknown model {name!r}: use tinycnn or a name of {SOURCE}, "
        "e.g. resnet18, mobilenet_v3_small, vit_b_16 (`lab models` lists all)"
    )


def suggestions(name: str) -> list[str]:
    """The known names closest to ``name`` (the same name in other case first), at most three."""
    if not isinstance(name, str):
        return []
    every = names()
    same = [n for n in every if n.lower() == name.strip().lower()]
    return same or difflib.get_close_matches(name.strip().lower(), every, n=3, cutoff=0.75)


def size_problem(name: str, image_size: int) -> str | None:
    """The message when a known model cannot take ``image_size`` images, naming the size; else
    None."""
    if not known(name) or not isinstance(image_size, int):
        return None
    need, exact = image_size_need(name)
    given = f"image size {image_size} given"
    if exact and image_size != need:
        return f"{name} takes {need}x{need} images only, {given}: use image size {need}"
    if image_size < need:
        return f"{name} needs images of at least {need}x{need}, {given}: use {need} or more"
    return None
