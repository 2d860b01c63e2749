"""Fairness of a comparison: what makes the chosen runs not compare like for like.

Owns the warnings the Compare page and the HTML export show above the table:
runs that differ in model, dataset, global batch, seed, precision, device
count (among multi-device runs) or host; a run that ran in another mode than
asked; a trainer run without summary.json; runs compared across scalings
(``lab.views.compare.scaling.warnings``); derived figures and what the lab cannot see
of a user's script or foreign logs (``lab.views.compare.derived_text.warnings``: of
those, only what the lab knows is compared above). With the runs' scalars it
also carries DataParallel's "only GPU 0 works" symptom
(``lab.views.compare.utilisation``). Each warning names the runs and their values and
says what to compare instead. Tested by tests/test_compare.py,
tests/test_scaling.py and tests/test_derived.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.views.compare import derived_text, scaling, utilisation
from lab.views.compare.derived import sees_config
from lab.views.compare.runs import CompareRun, labels
from lab.views.compare.speed import batches_seen
from lab.views.compare.table import choose_baseline, run_metrics, run_speed


@dataclass(frozen=True)
class FairnessWarning:
    """Why two chosen runs do not compare like for like; ``message`` is shown as is."""

    key: str
    message: str


def _differences(
    runs: Sequence[CompareRun], names: Mapping[str, str], metrics: Mapping[str, Mapping[str, Any]]
) -> list[FairnessWarning]:
    """What the runs differ in, among what the lab knows of them; modes not run as asked; missing
    summaries."""
    # a script's model, batch, seed are its own: not compared
    seen = {r.key for r in runs if sees_config(r)}
    out: list[FairnessWarning] = []

    def differ(
        key: str, what: str, values: dict[str, Any], why: str, everyone: bool = False
    ) -> None:
        values = {k: v for k, v in values.items() if everyone or k in seen}
        if len({json.dumps(v, sort_keys=True, default=str) for v in values.values()}) > 1:
            listed = ", ".join(f"{names[k]}={v}" for k, v in values.items())
            out.append(FairnessWarning(key, f"The runs differ in {what} ({listed}): {why}"))

    differ(
        "model",
        "model",
        {r.key: r.option("model") for r in runs},
        "throughput and memory measure different work.",
    )
    differ(
        "dataset",
        "dataset",
        {r.key: r.option("dataset") for r in runs},
        "losses and accuracies are not comparable.",
    )
    per_device = [m["per-device batch"] for k, m in metrics.items() if k in seen]
    weak = len(set(per_device)) == 1 and None not in per_device
    differ(
        "global_batch",
        "global batch",
        {k: m["global batch"] for k, m in metrics.items()},
        scaling.WEAK_BATCH_NOTE
        if weak
        else "steps mean different amounts of data; compare loss against samples seen.",
    )
    differ(
        "seed",
        "seed",
        {r.key: r.option("seed") for r in runs},
        "loss curves differ by chance as well as by mode.",
    )
    differ(
        "amp",
        "precision (amp)",
        {r.key: bool(r.option("amp")) for r in runs},
        "mixed precision changes both speed and memory.",
    )
    parallel = {
        k: len(m["devices"])
        for k, m in metrics.items()
        if m["effective mode"] not in (None, "single") and m["devices"]
    }
    differ(
        "device_count",
        "device count among the multi-device runs",
        parallel,
        "compare scaling efficiency rather than speedup.",
    )
    for r in runs:
        m = metrics[r.key]
        if m["effective mode"] and m["mode"] and m["effective mode"] != m["mode"]:
            reason = m["effective mode reason"] or "no reason recorded"
            out.append(
                FairnessWarning(
                    "effective_mode",
                    f"{names[r.key]} was asked to run as {m['mode']} but ran as "
                    f"{m['effective mode']} ({reason}).",
                )
            )
        if not r.summary and r.key in seen:  # a script's or foreign logs' are the "derived" warning
            out.append(
                FairnessWarning(
                    "no_summary",
                    f"{names[r.key]} has no summary.json (state: {r.state or 'unknown'}); its "
                    "figures come from its "
                    "event files and may cover only part of the run.",
                )
            )
    differ(
        "host",
        "host",
        {r.key: r.host for r in runs if r.host},
        "different machines make throughput incomparable.",
        everyone=True,
    )
    return out


def fairness_warnings(
    runs: Sequence[CompareRun],
    baseline_key: str | None = None,
    scalars: Mapping[str, Mapping[str, Any]] | None = None,
    throughput_tag: str | None = None,
    loss_tag: str | None = None,
) -> list[FairnessWarning]:
    """What makes the chosen runs an unfair comparison, one warning per cause.

    Differences in model, dataset, global batch, seed, precision (amp) or, among
    the runs that really used several devices, device count; a run whose
    effective mode is not the asked one; a run without summary.json; runs
    recorded on different hosts; runs compared across scalings against the
    baseline (default: ``choose_baseline``); with ``scalars``, a DataParallel
    run whose first GPU did most of the work; the derived figures' warnings,
    on ``throughput_tag`` and ``loss_tag`` as the table uses them.
    """
    if not runs:
        return []
    names = labels(runs)
    sc = scalars or {}
    metrics = {r.key: run_metrics(r, sc.get(r.key), throughput_tag, loss_tag) for r in runs}
    out = _differences(runs, names, metrics)
    baseline_key = baseline_key if baseline_key in metrics else choose_baseline(runs)
    # runs whose batches the lab cannot see: the "steps_speedup" warning
    if batches_seen(metrics[baseline_key]):
        known = {k: m for k, m in metrics.items() if batches_seen(m)}
        recorded = {r.key: r.scaling for r in runs if r.key in known}
        out += [
            FairnessWarning(k, m) for k, m in scaling.warnings(names, recorded, known, baseline_key)
        ]
    out += [FairnessWarning("only_gpu0", m) for m in utilisation.busy_warnings(runs, sc)]
    speeds = {k: run_speed(m, metrics[baseline_key]) for k, m in metrics.items()}
    util = {r.key: utilisation.utilisation(r, sc.get(r.key)).per_gpu for r in runs}
    out += [
        FairnessWarning(k, m)
        for k, m in derived_text.warnings(runs, names, metrics, speeds, baseline_key, util)
    ]
    return out
