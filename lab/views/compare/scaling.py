"""Strong and weak scaling: which question a comparison of modes asks, and the efficiency that
answers it.

Strong scaling keeps the global batch ("how much faster is the same work on N devices"); weak
scaling keeps the batch per device ("does each device still do as much as alone"). Owns the two
choices as Home offers them, how a run relates to the baseline by the batches both used, the label,
the efficiency of each, the warnings when runs are compared across scalings, and the words.
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.engine.spec.sweep import SCALINGS, STRONG, WEAK
from lab.views.compare.figures import RunFigures
from lab.views.compare.naming import few

CHOICES = {
    STRONG: "strong — same global batch in every mode",
    WEAK: "weak — same batch per device",
}
CHOICE_HELP = (
    "Strong (default): every mode gets the same global batch, so all compute the same training and "
    "the speedup is the speedup of that training (BatchNorm aside: its statistics are per device's "
    "batch unless DDP's --sync-bn). Weak: every device gets the same batch, so DDP "
    "on "
    "N devices trains with an N times larger global batch; efficiency is then throughput per "
    "device "
    "against the single run's."
)

HOW_TO_READ = """\
**Strong or weak scaling.** A *strong* scaling sweep keeps the global batch:
every mode computes the same training, and scaling efficiency = speedup /
(devices / baseline devices). A *weak* scaling sweep keeps the batch per
device, so the global batch grows with the devices: efficiency = throughput
per device / the baseline's throughput per device (1.0: each device does as
much as it did alone), and the throughput ratio is not the speedup of one and
the same training (a larger global batch takes fewer steps per epoch and
learns differently). The *scaling* column names each run's: the scaling its
sweep was recorded with, else what its batches say against the baseline's
(same global batch: strong; same batch per device: weak; neither: no
efficiency). DDP with 256 per GPU (1024 global) against DP with 256 global is
a weak run against a strong one: its ratio is not a speedup, and the
warnings say so."""

WEAK_BATCH_NOTE = (
    "weak scaling keeps the batch per device, so the global batch grows with the devices and a "
    "step "
    "means more data: compare loss against samples seen; efficiency is throughput per device."
)


def relation(figures: RunFigures, baseline: RunFigures) -> str | None:
    """``STRONG`` when a run used the baseline's global batch, ``WEAK`` when (only) its batch per
    device, else None."""
    if figures.global_batch is not None and figures.global_batch == baseline.global_batch:
        return STRONG
    if (
        figures.per_device_batch is not None
        and figures.per_device_batch == baseline.per_device_batch
    ):
        return WEAK
    return None


def label(recorded: str | None, related: str | None) -> str | None:
    """What the table says of a run: the scaling it was recorded with, else its relation to the
    baseline."""
    return recorded if recorded in SCALINGS else related


def efficiency(
    related: str | None,
    throughput: float | None,
    devices: int,
    baseline_throughput: float | None,
    baseline_devices: int,
) -> float | None:
    """Scaling efficiency by the run's relation to the baseline; None when neither scaling applies.

    Strong: speedup / (devices / baseline devices). Weak: throughput per
    device / the baseline's throughput per device.
    """
    if (
        related not in SCALINGS
        or not throughput
        or not baseline_throughput
        or devices <= 0
        or baseline_devices <= 0
    ):
        return None
    if related == WEAK:
        return (float(throughput) / devices) / (float(baseline_throughput) / baseline_devices)
    return (float(throughput) / float(baseline_throughput)) / (devices / baseline_devices)


def _listed(names: Mapping[str, str], keys: list[str]) -> str:
    return few([names[k] for k in keys])


def _same_work(figures: RunFigures, baseline: RunFigures) -> bool:
    """Same global and per-device batch as the baseline: strong and weak at once (e.g. DP fallen
    back to one device)."""
    return all(
        mine is not None and mine == theirs
        for mine, theirs in (
            (figures.global_batch, baseline.global_batch),
            (figures.per_device_batch, baseline.per_device_batch),
        )
    )


def warnings(
    names: Mapping[str, str],
    recorded: Mapping[str, str | None],
    figures: Mapping[str, RunFigures],
    baseline_key: str,
) -> list[tuple[str, str]]:
    """``(key, message)`` for runs compared across scalings.

    ``recorded``: each run's scaling from its run.json (None: not recorded);
    ``figures``: each run's, by key. Three cases: runs recorded under
    both scalings; runs that, against the baseline, keep its global batch next
    to runs that keep only its batch per device (the seeds' DDP 256 per GPU
    against DP 256 global); runs that keep neither.
    """
    out: list[tuple[str, str]] = []
    by_recorded = {s: [k for k, v in recorded.items() if v == s] for s in SCALINGS}
    mixed_records = all(by_recorded.values())
    if mixed_records:
        out.append(
            (
                "scaling",
                f"The runs were recorded under different scalings (strong: "
                f"{_listed(names, by_recorded[STRONG])}; weak: "
                f"{_listed(names, by_recorded[WEAK])}): "
                "strong keeps the global batch (the same training in every mode), weak keeps the "
                "batch per device (the global batch grows with the devices), so they answer "
                "different "
                "questions: read a strong run's speedup as the same training done faster, a weak "
                "run's "
                "efficiency as how much each device still does, not as a speedup.",
            )
        )
    base = figures[baseline_key]
    related = {
        k: relation(m, base)
        for k, m in figures.items()
        if k != baseline_key and not _same_work(m, base)
    }
    strong = [k for k, v in related.items() if v == STRONG]
    weak = [k for k, v in related.items() if v == WEAK]
    if strong and weak and not mixed_records:
        out.append(
            (
                "scaling",
                f"Against the baseline {names[baseline_key]}, {_listed(names, strong)} keep its "
                f"global batch (strong scaling) but {_listed(names, weak)} keep only its batch per "
                "device (weak scaling, a larger global batch): a throughput ratio across the two "
                "is "
                "not a speedup of the same training; run a sweep with one --scaling for both.",
            )
        )
    neither = [k for k, v in related.items() if v is None]
    if neither:
        out.append(
            (
                "scaling",
                f"{_listed(names, neither)} share neither the global batch nor the batch per "
                "device "
                f"with the baseline {names[baseline_key]}: neither strong nor weak scaling "
                "efficiency "
                "applies, so its efficiency is left empty; choose a baseline from its own sweep.",
            )
        )
    return out
