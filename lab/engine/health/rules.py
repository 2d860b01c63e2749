"""The health of a running run: what looks wrong while it still runs, as findings.

Pure functions over what the supervisor observed of a run (an
``Observation``: its progress and scalars, its processes alive or not, its
options); nothing here reads a file, signals a process or writes.
``findings(obs, before)`` returns the list status.json carries as ``health``,
empty when all is well; a finding still present keeps the ``since`` of its
first sighting. The findings (docs/contracts.md section 2):

- ``stalled``: processes alive, no new step (progress or events) for longer
  than ``stall_threshold`` (the ``stall_after`` option, or the larger of 60 s,
  20 median steps and 3 median gaps between progress updates); start-up counts
  from the launch, so a hang before the first step is caught.
- ``nan_loss``: a ``train/loss`` point that is NaN or infinite.
- ``chance_accuracy``: after 2 epochs, accuracy within 2 points of 1/classes.
- ``input_bound``: the last window waited for data over 30% of its step time.
- ``grad_spike``: the trainer's grad-norm warnings (``train/grad_norm_warning``).
- ``memory_creep``: the trainer's allocated memory (``mem/<device>/allocated_mib``, what its
  tensors hold), else (a script) a GPU's memory held by the run (NVML's used memory less other
  tenants' processes, ``sys/gpu<i>/mem_used_mib``), or on the CPU the process tree's RSS
  (``sys/rss_mib``), or for a Slurm job watched from afar a GPU's used memory as its node's
  sampler saw it (``sys/node<k>/gpu<i>/mem_used_mib``), keeps rising after warm-up instead of
  levelling off
  (``lab.engine.health.creep`` says how that is judged); the evidence is the slope in MiB/min.
- ``several_writers``: a script's event files written by several processes, into one folder
  (their points merge into one curve) or the same tags into several (one rank's curve shown).

The supervisor's glue (``lab.engine.health.watch``) adds the stalled run's
stacks and device strip to its evidence.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Sequence

from lab import tags
from lab.engine.health.creep import creep
from lab.runfolder import now_iso

MIN_STALL_S = 60.0
# before the first step of a run with --compile on: inductor compiles inside step 1 (resnet18 took
# 84 s on 2 cores here, larger models take minutes), which is no stall
COMPILE_STALL_S = 900.0
STALL_STEPS = 20  # median steps of silence before "stalled"
STALL_GAPS = 3  # ... or median gaps between progress updates (a long logging window)
CHANCE_AFTER_EPOCHS = 2
CHANCE_MARGIN = 0.02  # two points of accuracy
INPUT_BOUND_SHARE = 0.30
Points = Sequence[tuple[int, float]]  # (step, value), oldest first


@dataclass(frozen=True)
class Finding:
    """One thing wrong with a run: a key, a sentence, the fix, when first seen, and the evidence."""

    key: str
    message: str
    fix: str
    since: str
    evidence: dict[str, Any] = field(default_factory=dict)
    step: int = 0  # the optimizer step it was found at: where its health/<key> event goes

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "message": self.message,
            "fix": self.fix,
            "since": self.since,
            "evidence": dict(self.evidence, step=self.step),
        }


@dataclass(frozen=True)
class Observation:
    """What the supervisor saw of a run at ``now`` (epoch seconds). Empty sequences: nothing seen
    yet."""

    now: float
    started: float  # the launch: a hang before the first step counts from here
    alive: bool  # the run's processes still run
    last_activity: float | None = None  # newest progress or event, epoch seconds
    step: int = 0
    step_times_s: Sequence[float] = ()  # per optimizer step
    update_gaps_s: Sequence[float] = ()  # between progress updates
    loss: Points = ()  # train/loss
    acc: Points = ()  # val/acc, else train/acc
    data_ms: float | None = None  # the last window's perf/data_time_ms
    step_ms: float | None = None  # ... and perf/step_time_ms
    num_classes: int | None = None
    steps_per_epoch: int | None = None
    grad_warnings: Points = ()  # train/grad_norm_warning
    grad_limit: float = 0.0
    workers: int | None = None
    pin_memory: bool | None = None
    stall_after: float = 0.0
    # the supervisor's memory samples, (epoch seconds, MiB) per tag: every GPU's, else the RSS
    memory: dict[str, Sequence[tuple[float, float]]] = field(default_factory=dict)
    # a script's event files written by several processes (watch.writers): folders and tags
    writers: dict[str, Any] = field(default_factory=dict)
    compiling: bool = False  # --compile on: the first step also compiles the model


def stall_threshold(
    stall_after: float, step_times_s: Sequence[float], update_gaps_s: Sequence[float]
) -> float:
    """Seconds of silence before "stalled": ``stall_after`` when set, else the automatic rule."""
    if stall_after and stall_after > 0:
        return float(stall_after)
    out = MIN_STALL_S
    if step_times_s:
        out = max(out, STALL_STEPS * statistics.median(step_times_s))
    if update_gaps_s:
        out = max(out, STALL_GAPS * statistics.median(update_gaps_s))
    return out


def stalled(obs: Observation) -> tuple[str, str, dict[str, Any]] | None:
    """(message, fix, evidence) when the run's processes live but no step came for too long."""
    if not obs.alive:
        return None
    threshold = stall_threshold(obs.stall_after, obs.step_times_s, obs.update_gaps_s)
    if obs.compiling and obs.last_activity is None and not obs.stall_after:
        threshold = max(threshold, COMPILE_STALL_S)
    idle = obs.now - (obs.last_activity if obs.last_activity is not None else obs.started)
    if idle <= threshold:
        return None
    where = (
        f"after step {obs.step}"
        if obs.last_activity is not None
        else "since the launch, before any step"
    )
    return (
        f"No new step for {idle:.0f} s ({where}) while the processes are alive: a rank is stuck "
        "(a collective "
        "another rank never joined, a deadlock, a hung data loader or start-up); the limit is "
        f"{threshold:.0f} s.",
        "Read the saved stacks: the rank whose stack is not in the same collective as the others "
        "is the one "
        "that left (or never reached) it. Check the device strip: GPUs at 0% with memory held is "
        "a hang, "
        "not slowness. Stop the run; set stall_after higher if its steps are just slow.",
        {"idle_s": round(idle, 1), "threshold_s": round(threshold, 1), "last_step": obs.step},
    )


def nan_loss(obs: Observation) -> tuple[str, str, dict[str, Any]] | None:
    bad = next(((s, v) for s, v in obs.loss if not math.isfinite(v)), None)
    if bad is None:
        return None
    return (
        f"train/loss became {bad[1]} at step {bad[0]}: the run diverged and learns nothing from "
        "here.",
        "Lower the learning rate (e.g. by 10x), add warm-up or gradient clipping; with --amp, "
        "check the "
        "GradScaler; turn on stop_on_nan (--stop-on-nan) so such a run ends at once.",
        {"first_step": bad[0], "value": str(bad[1])},
    )


def chance_accuracy(obs: Observation) -> tuple[str, str, dict[str, Any]] | None:
    n, per_epoch = obs.num_classes, obs.steps_per_epoch
    if not obs.acc or not n or n < 2 or not per_epoch or obs.step < CHANCE_AFTER_EPOCHS * per_epoch:
        return None
    step, acc = obs.acc[-1]
    chance = 1.0 / n
    if not math.isfinite(acc) or abs(acc - chance) > CHANCE_MARGIN:
        return None
    return (
        f"Accuracy is {acc:.1%} after {obs.step // per_epoch} epochs, the {chance:.1%} of "
        "guessing among "
        f"{n} classes: the model learns nothing.",
        "Usual causes: a learning rate far too high or too low; a DistributedSampler without "
        "set_epoch (every "
        "epoch the same order) or no shuffling; labels shuffled apart from their images (a "
        "transform or an "
        "index mix-up); a frozen model (requires_grad off, optimizer built before the wrap).",
        {"accuracy": round(acc, 4), "chance": round(chance, 4), "acc_step": step},
    )


def input_bound(obs: Observation) -> tuple[str, str, dict[str, Any]] | None:
    if obs.data_ms is None or not obs.step_ms or obs.step_ms <= 0:
        return None
    share = obs.data_ms / obs.step_ms
    if share <= INPUT_BOUND_SHARE:
        return None
    workers = "?" if obs.workers is None else obs.workers
    pin = (
        "?"
        if obs.pin_memory is None
        else ("on" if obs.pin_memory else "off (the CPU: pinning does nothing)")
    )
    return (
        f"The last window waited for data {obs.data_ms:.1f} ms of each {obs.step_ms:.1f} ms step "
        f"({share:.0%}): "
        "the input pipeline starves the devices.",
        f"Raise --workers (now {workers}) so batches load in parallel with the step; pin_memory "
        f"is {pin}; "
        "cache or pre-decode the data set, or make its transforms cheaper.",
        {
            "data_ms": round(obs.data_ms, 2),
            "step_ms": round(obs.step_ms, 2),
            "share": round(share, 3),
            "workers": obs.workers,
            "pin_memory": obs.pin_memory,
        },
    )


def grad_spike(obs: Observation) -> tuple[str, str, dict[str, Any]] | None:
    if not obs.grad_warnings:
        return None
    first, top = obs.grad_warnings[0], max(v for _, v in obs.grad_warnings)
    return (
        f"The gradient norm went above {obs.grad_limit:g} at {len(obs.grad_warnings)} step(s), "
        "first at step "
        f"{first[0]} ({first[1]:.4g}; highest {top:.4g}).",
        "Spikes come before divergence: lower the learning rate, clip gradients "
        "(torch.nn.utils.clip_grad_norm_), or look at the batch of that step.",
        {
            "count": len(obs.grad_warnings),
            "first_step": first[0],
            "max_norm": top,
            "limit": obs.grad_limit,
        },
    )


def memory_creep(obs: Observation) -> tuple[str, str, dict[str, Any]] | None:
    """The series whose memory rises fastest after warm-up, when it keeps rising."""
    found = [(tag, ev) for tag, pts in obs.memory.items() if (ev := creep(pts)) is not None]
    if not found:
        return None
    tag, ev = max(found, key=lambda f: f[1]["slope_mib_per_min"])
    gpu = tag.split("/")[1] if tag.startswith(tags.SYS_GPU) else None
    if tag.startswith(tags.MEM):
        what = f"The trainer's allocated memory on {tag.split('/')[1]}"
    elif tag.startswith(tags.SYS_NODE):  # sys/node<k>/gpu<i>/mem_used_mib
        node, gpu = tag.split("/")[1:3]
        what = f"{gpu.upper()}'s memory on the job's {node}"
    elif gpu:
        what = f"{gpu.upper()}'s memory held by the run"
    else:
        what = "The run's resident memory (RSS)"
    return (
        f"{what} keeps growing after warm-up: {ev['slope_mib_per_min']:.0f} MiB per minute over "
        f"the last {ev['window_s']:.0f} s ({ev['from_mib']:.0f} to {ev['to_mib']:.0f} MiB) "
        "instead of levelling off. Memory should rise and then level off; if it keeps growing, "
        "tensors are not freed.",
        "Look for a tensor kept alive across steps: a loss appended to a list without .item() "
        "(losses.append(loss)) keeps every step's graph with its activations; append "
        "loss.item() (or loss.detach()) instead. The same for logits, outputs or metrics kept "
        "from step to step: keep numbers, or detached tensors, never ones that require grad.",
        {"series": tag, **ev},
    )


def several_writers(obs: Observation) -> tuple[str, str, dict[str, Any]] | None:
    crowded, shared = obs.writers.get("folders") or {}, obs.writers.get("shared") or []
    if not crowded and not shared:
        return None
    if crowded:
        folder, pids = next(iter(crowded.items()))
        what = (
            f"{len(pids)} processes (pids {', '.join(map(str, pids))}) write event files into "
            f"{folder}: their points merge into one curve per tag, every step drawn "
            f"{len(pids)} times."
        )
    else:
        n = len(shared)
        what = (
            f"{n} tag{'s' * (n != 1)} ({', '.join(shared[:3])}{' …' * (n > 3)}) "
            f"{'are' if n != 1 else 'is'} logged in several folders, one per process: the curves "
            "show one rank's points only."
        )
    return (
        what,
        "Log from rank 0 only: create the SummaryWriter under `if dist.get_rank() == 0:` (or "
        "give each rank its own tag prefix, e.g. rank1/train/loss, if every rank's curve matters).",
        {"folders": crowded, "shared": shared[:20]},
    )


CHECKS = {
    "stalled": stalled,
    "nan_loss": nan_loss,
    "chance_accuracy": chance_accuracy,
    "input_bound": input_bound,
    "grad_spike": grad_spike,
    "memory_creep": memory_creep,
    "several_writers": several_writers,
}


def findings(obs: Observation, before: Sequence[Finding] = ()) -> list[Finding]:
    """Every finding now, in ``CHECKS`` order; one seen ``before`` keeps its ``since``, ``step`` and
    evidence keys the check does not make again (the stacks the supervisor added)."""
    old = {f.key: f for f in before}
    out = []
    for key, check in CHECKS.items():
        got = check(obs)
        if got is None:
            continue
        message, fix, evidence = got
        prev = old.get(key)
        if prev is None:
            out.append(Finding(key, message, fix, now_iso(), evidence, obs.step))
        else:
            out.append(
                Finding(key, message, fix, prev.since, {**prev.evidence, **evidence}, prev.step)
            )
    return out


def from_dicts(items: Any) -> list[Finding]:
    """status.json's ``health`` back as findings (what a restarted supervisor or a reader finds
    there)."""
    out = []
    for d in items if isinstance(items, list) else ():
        if isinstance(d, dict) and d.get("key"):
            ev = dict(d.get("evidence") or {})
            out.append(
                Finding(
                    str(d["key"]),
                    str(d.get("message", "")),
                    str(d.get("fix", "")),
                    str(d.get("since", "")),
                    ev,
                    int(ev.pop("step", 0) or 0),
                )
            )
    return out
