"""Which names ``--model`` takes and the image size each needs: the facts the trainer and the lab
share, without importing torch (the lab's form and CLI read them on every check).

``OWN`` are the trainer's own models (``training.models`` builds them) with the smallest image
side each takes; every other name is one of ``torchvision.models.list_models(module=
torchvision.models)``, whose smallest side is torchvision's ``min_size`` from the model's weight
metadata. ViT and MaxViT take exactly that size and no other (their position tables or attention
grids are sized at construction).
"""

from __future__ import annotations

from functools import lru_cache

# name: its smallest image side
OWN = {"tinycnn": 4, "tinyresnet": 4, "tinyvit": 4, "tinymobilenet": 4, "tinyconvnext": 8}
EXACT_SIZE_PREFIXES = ("vit_", "maxvit_")


@lru_cache(maxsize=1)
def names() -> tuple[str, ...]:
    """Every name ``--model`` takes: the trainer's own first, then torchvision's classification
    models in torchvision's order."""
    import torchvision.models as tvm

    return tuple(OWN) + tuple(tvm.list_models(module=tvm))


@lru_cache(maxsize=None)
def input_size(name: str) -> tuple[int, bool]:
    """``(smallest image side, only that size)`` for a known model."""
    if name in OWN:
        return OWN[name], False
    import torchvision.models as tvm

    sizes = [w.meta.get("min_size", (1, 1)) for w in tvm.get_model_weights(name)]
    return min((max(s) for s in sizes), default=1), name.startswith(EXACT_SIZE_PREFIXES)
