"""Fairness of a comparison: what makes the chosen runs not compare like for like, one warning per
cause, each naming the runs and their values and saying what to compare instead.

Runs that differ in model, dataset, global batch, seed, precision (what ran: fp32, fp16, bf16),
precision policy (among the half-precision runs: autocast under single, DP and DDP, FSDP's
``MixedPrecisionPolicy`` under fsdp), accumulation steps, memory format, DDP's own options (among
the ddp runs), NCCL preset, device count or host; a mode not run as asked; a trainer run without
summary.json; runs compared across scalings (``lab.views.compare.scaling``); DataParallel's "only
GPU 0 works" (``lab.views.compare.utilisation``); and figures the lab derived or cannot see of a
user's script or foreign logs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.engine.launch import knobs
from lab.engine.spec.modes import DDP, DP, FSDP, SINGLE
from lab.engine.spec.run import RunConfig
from lab.runfolder import SCRIPT
from lab.views.compare import scaling, utilisation
from lab.views.compare.derived import DERIVED, PEAKS_NVML, sees_config
from lab.views.compare.figures import RunFigures
from lab.views.compare.naming import few
from lab.views.compare.runs import CompareRun
from lab.views.compare.speed import STEPS, Speed

IDLE_PCT = 5.0  # a GPU whose mean utilisation stays under this did no work worth the name
MODEL_WHY = "throughput and memory measure different work."
DATASET_WHY = "losses and accuracies are not comparable."
BATCH_WHY = "steps mean different amounts of data; compare loss against samples seen."
SEED_WHY = "loss curves differ by chance as well as by mode."
AMP_WHY = "mixed precision changes both speed and memory."
POLICY_WHY = (
    "autocast keeps the norms, softmax and loss in fp32, FSDP's MixedPrecisionPolicy runs them in "
    "half precision too: another computation, so the difference in speed and loss is not the "
    "mode's alone."
)
POLICY_CAUSE = "precision policy differs"
POLICY_WORDS = {"autocast": "autocast", "fsdp": "FSDP's MixedPrecisionPolicy"}
KNOB_WHY = "it changes the speed of each step (and memory)."
DDP_KNOB_WHY = "DDP's options change when and how the gradients are all-reduced, so the speed."
NCCL_WHY = "its NCCL variables change how the collectives run."
FSDP_KNOB_WHY = "FSDP's options change when parameters are gathered and where they live, so speed."
# the options besides precision that change speed (their form fields say so, ``differs``),
# compared among the runs the lab sees; DDP's and FSDP's own only among the runs of that mode (a
# sweep runs the other modes at the default)
_SPEED = [f for f in knobs.FIELDS if f.differs]
KNOBS = tuple(f for f in _SPEED if f.name not in knobs.ONLY_IN)
MODE_KNOBS = tuple(
    (mode, tuple(f for f in _SPEED if knobs.ONLY_IN.get(f.name) == mode), why)
    for mode, why in ((DDP, DDP_KNOB_WHY), (FSDP, FSDP_KNOB_WHY))
)
_DEFAULT = RunConfig()
BATCHNORM_WHY = (
    "BatchNorm's statistics depend on the batch each device normalises over, so these runs do not "
    "compute the same training (loss curves and accuracies differ beyond chance); under DDP "
    "--sync-bn takes them over the global batch."
)
DEVICES_WHY = "compare scaling efficiency rather than speedup."
HOST_WHY = "different machines make throughput incomparable."


@dataclass(frozen=True)
class FairnessWarning:
    """Why the chosen runs do not compare like for like; ``message`` is shown as is, ``cause`` (if
    any) in the count of notes."""

    key: str
    message: str
    cause: str = ""


def _differ(
    names: Mapping[str, str],
    key: str,
    what: str,
    values: Mapping[str, Any],
    why: str,
    cause: str = "",
) -> list[FairnessWarning]:
    """The warning that the runs differ in ``what`` (their ``values`` by key), if they do."""
    if len({json.dumps(v, sort_keys=True, default=str) for v in values.values()}) <= 1:
        return []
    by_value: dict[str, list[str]] = {}
    for k, v in values.items():
        by_value.setdefault(str(v), []).append(names[k])
    listed = "; ".join(f"{v}: {few(ns)}" for v, ns in by_value.items())
    return [FairnessWarning(key, f"The runs differ in {what} ({listed}): {why}", cause)]


def _not_as_asked(
    runs: Sequence[CompareRun], names: Mapping[str, str], figures: Mapping[str, RunFigures]
) -> list[FairnessWarning]:
    """Runs that ran in another mode than asked, and trainer runs without summary.json."""
    out: list[FairnessWarning] = []
    for r in runs:
        m = figures[r.key]
        if m.effective_mode and m.mode and m.effective_mode != m.mode:
            reason = m.effective_mode_reason or "no reason recorded"
            out.append(
                FairnessWarning(
                    "effective_mode",
                    f"{names[r.key]} was asked to run as {m.mode} but ran as "
                    f"{m.effective_mode} ({reason}).",
                )
            )
        # a script's or foreign logs' are the "derived" warning
        if not r.summary and sees_config(r):
            out.append(
                FairnessWarning(
                    "no_summary",
                    f"{names[r.key]} has no summary.json (state: {r.state or 'unknown'}); its "
                    "figures come from its "
                    "event files and may cover only part of the run.",
                )
            )
    return out


def precision(r: CompareRun) -> str:
    """What the run computed in: summary.json's precision (what ran; ``--amp`` is fp16 on CUDA,
    bf16 on the CPU), else the asked ``precision``, ``amp`` where only ``--amp`` was asked."""
    ran = (r.summary or {}).get("precision")
    if isinstance(ran, str) and ran:
        return ran
    asked = r.option("precision")
    if asked and asked != "fp32":
        return str(asked)
    return "amp" if r.option("amp") else "fp32"


def precision_policy(r: CompareRun) -> str | None:
    """How the run's half precision was applied: summary.json's ``precision_policy`` ("autocast",
    "fsdp", null in fp32); for a summary written before it, derived from the precision and the mode
    that ran (fsdp: FSDP's policy; any other mode: autocast)."""
    s = r.summary or {}
    if "precision_policy" in s:
        policy = s["precision_policy"]
        return policy if isinstance(policy, str) and policy else None
    if precision(r) == "fp32":
        return None
    return "fsdp" if (s.get("effective_mode") or r.option("mode")) == FSDP else "autocast"


def _knob(r: CompareRun, key: str) -> Any:
    """An option's value with its default filled in, so that "not given" equals the default."""
    v = r.option(key)
    if key == "bucket_cap_mb":
        return float(v or 25.0)  # 0 and none are DDP's 25
    default = getattr(_DEFAULT, key)
    if isinstance(default, bool):
        return bool(v)
    return type(default)(v or default)  # a number, or on|off words


def _knobs(seen: Sequence[CompareRun], names: Mapping[str, str]) -> list[FairnessWarning]:
    """Precision, accumulation, memory format, DDP's options among the ddp runs, the NCCL preset:
    every option that changes speed (``varied.exempt`` drops the one a sweep varied)."""
    out = _differ(names, "amp", "precision", {r.key: precision(r) for r in seen}, AMP_WHY)
    # among the half-precision runs only: against fp32 the precision's own note says it
    policies = {r.key: POLICY_WORDS.get(p, p) for r in seen if (p := precision_policy(r))}
    out += _differ(
        names, "precision_policy", "precision policy", policies, POLICY_WHY, POLICY_CAUSE
    )
    for mode, fields, why in ((None, KNOBS, KNOB_WHY), *MODE_KNOBS):
        ones = [r for r in seen if mode is None or r.option("mode") == mode]
        for f in fields:
            values = {r.key: _knob(r, f.name) for r in ones}
            out += _differ(names, f.name, f.differs, values, why, f.cause)
    preset = {r.key: r.option("nccl_preset") or "none" for r in seen}
    return out + _differ(names, "nccl_preset", "NCCL preset", preset, NCCL_WHY)


def bn_batch(r: CompareRun, m: RunFigures) -> Any:
    """The samples a BatchNorm layer of ``r`` normalises over per forward: the micro-batch of one
    device (DP splits it over its GPUs), or the global micro-batch under sync BatchNorm; None where
    the run has no BatchNorm or its batch is unknown."""
    s = r.summary or {}
    if not s.get("batchnorm"):
        return None
    micro = s.get("micro_batch") or m.per_device_batch  # a device's forward, under accumulation
    if micro is None:
        return None
    if s.get("sync_bn"):
        return int(micro) * int(s.get("world_size") or 1)
    split = len(m.devices) if m.effective_mode == DP and m.devices else 1
    return int(micro) // max(1, split)


def _batchnorm(
    seen: Sequence[CompareRun], names: Mapping[str, str], figures: Mapping[str, RunFigures]
) -> list[FairnessWarning]:
    """Runs with BatchNorm whose layers normalise over different batches: not the same training."""
    per = {r.key: b for r in seen if (b := bn_batch(r, figures[r.key])) is not None}
    return _differ(names, "batchnorm", "BatchNorm batch (samples)", per, BATCHNORM_WHY)


def _differences(
    runs: Sequence[CompareRun], names: Mapping[str, str], figures: Mapping[str, RunFigures]
) -> list[FairnessWarning]:
    """What the runs differ in, among what the lab knows of them; modes not run as asked; missing
    summaries."""
    # a script's model, batch, seed are its own: not compared
    seen = [r for r in runs if sees_config(r)]
    per_device = [figures[r.key].per_device_batch for r in seen]
    weak = len(set(per_device)) == 1 and None not in per_device
    out = _differ(names, "model", "model", {r.key: r.option("model") for r in seen}, MODEL_WHY)
    out += _differ(
        names, "dataset", "dataset", {r.key: r.option("dataset") for r in seen}, DATASET_WHY
    )
    out += _differ(
        names,
        "global_batch",
        "global batch",
        {r.key: figures[r.key].global_batch for r in seen},
        scaling.WEAK_BATCH_NOTE if weak else BATCH_WHY,
    )
    out += _differ(names, "seed", "seed", {r.key: r.option("seed") for r in seen}, SEED_WHY)
    out += _knobs(seen, names)
    out += _batchnorm(seen, names, figures)
    parallel = {
        r.key: len(m.devices)
        for r in seen
        if (m := figures[r.key]).effective_mode not in (None, SINGLE) and m.devices
    }
    out += _differ(
        names, "device_count", "device count among the multi-device runs", parallel, DEVICES_WHY
    )
    out += _not_as_asked(runs, names, figures)
    hosts = {r.key: r.host for r in runs if r.host}  # every run's, the lab records where it ran
    return out + _differ(names, "host", "host", hosts, HOST_WHY)


def _listed(names: Mapping[str, str], keys: Sequence[str]) -> str:
    return few([names[k] for k in keys])


def _what(r: CompareRun) -> str:
    return "a user's script" if r.kind == SCRIPT else "foreign TensorBoard logs"


def _sources(m: RunFigures) -> str:
    speed = (
        f"throughput from its tag {m.throughput_of}"
        if m.throughput_of
        else f"speed as steps/s of {m.loss_tag}"
        if m.steps_per_sec
        else "no speed figure (no loss tag)"
    )
    memory = (
        "peak memory from NVML's used memory per GPU, not the allocator's peak"
        if m.peaks_of == PEAKS_NVML
        else "no per-device memory (no GPU samples)"
    )
    return f"{speed}; {memory}; wall time and utilisation from the supervisor's records"


def _seen(r: CompareRun, name: str, m: RunFigures) -> str:
    devices = ", ".join(m.devices or []) or "none"
    if r.kind == SCRIPT:
        return (
            f"of {name} ({_what(r)}) it knows only the devices it gave ({devices}) and the mode "
            "it launched "
            f"({m.mode or '?'}), not what the script did with them, nor its model, data or "
            "batch"
        )
    return (
        f"of {name} ({_what(r)}) only the GPUs sampled in its sys/ ({devices}), "
        "not its mode, model or batch"
    )


def _derived(
    runs: Sequence[CompareRun],
    names: Mapping[str, str],
    figures: Mapping[str, RunFigures],
    speeds: Mapping[str, Speed],
    baseline_key: str,
) -> list[tuple[str, str]]:
    """``(key, message)`` for figures the lab derived or cannot see: what a derived figure is of
    (``derived``), a speedup of steps/s (``steps_speedup``) or of a picked tag against samples/s
    (``picked_tag``), runs the lab sees unequally (``lab_sees``), a script's idle GPUs
    (``idle_gpus``)."""
    out: list[tuple[str, str]] = []
    blind = [r for r in runs if not sees_config(r)]
    for r in blind:
        if figures[r.key].figures == DERIVED:
            out.append(
                (
                    "derived",
                    f"{names[r.key]}'s figures are derived ({_what(r)}, no summary.json): "
                    f"{_sources(figures[r.key])}.",
                )
            )
    by_steps = [k for k, s in speeds.items() if k != baseline_key and s.unit == STEPS]
    if by_steps:
        assumed = any(speeds[k].assumed for k in by_steps)
        out.append(
            (
                "steps_speedup",
                f"The speedup of {_listed(names, by_steps)} is of steps/s (the step rate of "
                "the loss tag), not samples/s: it equals a samples/s speedup only if each step "
                "trains the baseline's global batch"
                + (
                    ", which the lab cannot see in a script; efficiency assumes it does (strong "
                    "scaling): if the script keeps the batch per device instead, read its "
                    "speedup as its efficiency."
                    if assumed
                    else "."
                ),
            )
        )
    for k, s in speeds.items():
        if k != baseline_key and s.of and "against" in s.of and s.unit != STEPS:
            out.append(
                (
                    "picked_tag",
                    f"{names[k]}'s speedup divides {s.of}: a speedup only if that tag counts "
                    "samples per second of the same global batch.",
                )
            )
    if blind and len(blind) < len(runs):
        out.append(
            (
                "lab_sees",
                "The lab does not see as much of every run: of its trainer's runs it knows the "
                "model, data, batch and the devices and mode they really used; "
                + "; ".join(_seen(r, names[r.key], figures[r.key]) for r in blind)
                + ". Make sure they train the same model, data and global batch.",
            )
        )
    for r in blind:
        idle = [
            g
            for g in figures[r.key].devices or []
            if figures[r.key].utilisation.per_gpu.get(g, 100.0) < IDLE_PCT
        ]
        if idle:
            out.append(
                (
                    "idle_gpus",
                    f"{', '.join(idle)} given to {names[r.key]} stayed idle (mean utilisation "
                    "under "
                    f"{IDLE_PCT:.0f}%): the script may use fewer devices than it was given, which "
                    "lowers its efficiency per device.",
                )
            )
    return out


def fairness_warnings(
    runs: Sequence[CompareRun],
    names: Mapping[str, str],
    figures: Mapping[str, RunFigures],
    speeds: Mapping[str, Speed],
    baseline_key: str,
) -> list[FairnessWarning]:
    """What makes the chosen runs an unfair comparison against the baseline, one warning per cause
    (module docstring); ``figures`` and ``speeds`` are the runs' by key."""
    if not runs:
        return []
    out = _differences(runs, names, figures)
    # runs whose batches the lab cannot see: the "steps_speedup" warning
    if figures[baseline_key].batches_seen:
        known = {k: m for k, m in figures.items() if m.batches_seen}
        recorded = {r.key: r.scaling for r in runs if r.key in known}
        out += [
            FairnessWarning(k, m) for k, m in scaling.warnings(names, recorded, known, baseline_key)
        ]
    utils = {k: m.utilisation for k, m in figures.items()}
    out += [FairnessWarning("only_gpu0", m) for m in utilisation.gpu0_warnings(runs, names, utils)]
    out += [FairnessWarning(k, m) for k, m in _derived(runs, names, figures, speeds, baseline_key)]
    return out
