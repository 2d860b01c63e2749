"""The option matrix: every pair of values a user can pick either trains or is refused.

Owns the plan of ``python scripts/option_matrix.py`` and its verdict. The factors are the mode, the
model family (``FAMILIES``: a plain CNN, BatchNorm, LayerNorm, depthwise + squeeze-excitation,
stochastic depth), a global batch whose validation splits evenly over the ranks or not (digits'
355 validation images over 2 ranks at micro-batches of 59: 4 forwards on one rank, 3 on the
other), resuming another mode's checkpoint or not, and each of the trainer's options that declares
``matrix`` values in ``training.options.KNOBS`` (precision, channels-last, accumulation,
compile, FSDP's resharding and CPU offload, DDP's static graph and sync BatchNorm): a new option
enters the matrix by its entry there. ``plan`` covers every pair of values that can meet
(``pairwise``: greedy, deterministic); a pair the trainer refuses (``refusal``: its own parser and
device checks, in this process) gets a row of its own with every other factor at its default, and
that row must be refused in one line before anything starts. Every other row must train its
steps, validate and finish. A resuming row first needs a checkpoint of another mode (``donor``:
an fsdp run's sharded ``last.dcp`` for the other modes, a single run's ``last.pt`` for fsdp).

``scripts/option_matrix.py`` runs the rows for real (``training.matrix_worker`` in each
process); ``problems`` holds each row's ``Outcome`` to the plan, ``table`` writes the rows as
Markdown (with their outcomes once run), and ``combinations`` the table of what combines with what
(docs/option-matrix.md is generated from it, ``write_docs``). The CPU tier (``Tier("cpu")``)
is what this machine can run, in the suite; ``scripts/gpu_check.py --matrix`` runs the GPU tier
(fp16, CPU offload, sync BatchNorm, NCCL, the torchvision models at their sizes) on a machine with
two GPUs or more.
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

from training.options import KNOBS

MODES = ("single", "dp", "ddp", "fsdp")
TORCHRUN_MODES = ("ddp", "fsdp")
RANKS = 2  # ddp and fsdp rows: two ranks (gloo on the CPU, NCCL on two GPUs)
# family: (the CPU tier's model, the GPU tier's model): torchvision's same blocks, at a size each
# can run; on this CPU resnet18 took 110-145 s for 3 steps in bf16 and mobilenet_v3_small 677 s to
# compile (2 cores, busy), where their tiny kin take seconds
FAMILIES = {
    "plain CNN": ("tinycnn", "tinycnn"),
    "BatchNorm": ("tinyresnet", "resnet18"),
    "LayerNorm": ("tinyvit", "vit_b_16"),
    "depthwise + SE": ("tinymobilenet", "mobilenet_v3_small"),
    "stochastic depth": ("tinyconvnext", "convnext_tiny"),
}
VALIDATION = ("even", "uneven")  # micro-batches of EVEN_MICRO or UNEVEN_MICRO images per device
EVEN_MICRO = 16
UNEVEN_MICRO = 59  # 355 digits over 2 ranks: 178 and 177 images, 4 and 3 forwards
RESUME = ("fresh", "other mode")
STEPS = 3  # optimizer steps a row trains (a resuming row: DONOR_STEPS more after its donor's)
DONOR_STEPS = 2
LR = "0.01"
# values a row takes only where the pair it was started for has them: compiling costs a minute or
# more of a CPU per process (inductor and gcc), so each compile row covers as many pairs as it can
COSTLY = (("compile", "on"),)
# rows every plan starts from, the rest filled in as any row's: issue 53's findings, each of which
# crashed or hung before (BatchNorm under FSDP's bf16 policy; an uneven validation under fsdp;
# a single run's checkpoint into fsdp's shards, and fsdp's sharded one into a single run)
SEEDS = (
    {"mode": "fsdp", "family": "BatchNorm", "precision": "bf16"},
    {"mode": "fsdp", "family": "plain CNN", "validation": "uneven"},
    {"mode": "fsdp", "resume": "other mode"},
    {"mode": "single", "resume": "other mode"},
)


@dataclass(frozen=True)
class Tier:
    """Where the matrix runs: ``cpu`` (gloo, the small models) or ``gpu`` (CUDA, the
    GPU-only values and torchvision's models at their own image sizes)."""

    name: str = "cpu"

    @property
    def gpu(self) -> bool:
        return self.name == "gpu"

    def model(self, family: str) -> str:
        return FAMILIES[family][1 if self.gpu else 0]

    def image_size(self, model: str) -> int:
        if self.gpu and model.startswith("vit_"):
            return 224
        return 32 if self.gpu else 16


@dataclass(frozen=True)
class Factor:
    """One axis of the matrix: its name, the values tried (the first is the default), and the
    option's flag when it is one of the trainer's (``None`` for mode, family, validation and
    resume)."""

    name: str
    values: tuple[Any, ...]
    flag: str | None = None
    only_in: str | None = None  # a mode's own option: its other values meet that mode only


def factors(tier: Tier) -> tuple[Factor, ...]:
    """The matrix's axes for ``tier``: the run's own, then every option with ``matrix`` values
    (the GPU-only ones in the GPU tier only)."""
    own = (
        Factor("mode", MODES),
        Factor("family", tuple(FAMILIES)),
        Factor("validation", VALIDATION),
        Factor("resume", RESUME),
    )
    options = tuple(
        Factor(
            o.name,
            tuple(v for v in o.matrix if tier.gpu or v not in o.gpu_only),
            o.flag,
            o.only_in,
        )
        for o in KNOBS
        if o.matrix
    )
    return own + tuple(f for f in options if len(f.values) > 1)


Row = dict  # factor name -> value


def defaults(axes: Sequence[Factor]) -> Row:
    return {f.name: f.values[0] for f in axes}


def parts(row: Row, tier: Tier) -> int:
    """How many devices split the global batch: ranks under torchrun, DP's GPUs, else one."""
    if row["mode"] in TORCHRUN_MODES:
        return RANKS
    return RANKS if row["mode"] == "dp" and tier.gpu else 1


def argv(row: Row, tier: Tier, log_dir: Path | str, steps: int = STEPS) -> list[str]:
    """The trainer's command line for ``row`` (without torchrun's part)."""
    model = tier.model(row["family"])
    micro = UNEVEN_MICRO if row["validation"] == "uneven" else EVEN_MICRO
    batch = micro * parts(row, tier) * int(row.get("accum_steps", 1))
    out = ["--mode", row["mode"], "--model", model, "--image-size", str(tier.image_size(model))]
    out += ["--batch-size", str(batch), "--max-steps", str(steps), "--log-every", "1"]
    out += ["--lr", LR, "--seed", "0", "--dist-timeout", "120", "--log-dir", str(log_dir)]
    out += ["--device", "cuda" if tier.gpu else "cpu"]
    for o in KNOBS:
        value = row.get(o.name)
        if not o.matrix or value in (None, False) or value == o.matrix[0]:
            continue
        out += [o.flag] if o.kind == "check" else [o.flag, str(value)]
    return out


def refusal(row: Row, tier: Tier) -> str | None:
    """The trainer's one-line refusal of ``row`` before anything starts, or None: its parser (as
    under torchrun where the mode needs it) and its checks of the devices, run in this process.
    A resume is checked by the trainer when it reads the checkpoint; the matrix's own resumes
    are all of checkpoints that fit."""
    from training import compiling, knobs, models
    from training.cli import BadInput, parse_args

    saved = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE")}
    os.environ.update(RANK="0", WORLD_SIZE=str(parts(row, tier)))
    try:
        args = parse_args(argv(row, tier, "matrix-check"))
        models.check(args.model, args.image_size)
        import torch

        gpus = parts(row, tier) if tier.gpu else 0
        placement = SimpleNamespace(
            device=torch.device("cuda", 0) if tier.gpu else torch.device("cpu"),
            world_size=RANKS if row["mode"] in TORCHRUN_MODES else 1,
            device_ids=list(range(gpus)) if row["mode"] == "dp" else [],
            effective_mode=row["mode"] if tier.gpu or row["mode"] != "dp" else "single",
        )
        knobs.check(args, placement)
        compiling.check(args, placement)
    except BadInput as e:
        return str(e)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return None


def _pairs(row: Row, axes: Sequence[Factor]) -> set[tuple[tuple[str, Any], tuple[str, Any]]]:
    return {
        ((a.name, row[a.name]), (b.name, row[b.name])) for a, b in itertools.combinations(axes, 2)
    }


@dataclass
class Plan:
    """The rows to run: those that must train (``trains``) and those that must be refused, each
    with the trainer's words (``refused``: row, message); ``pairs`` of values each trains."""

    tier: Tier
    axes: tuple[Factor, ...]
    trains: list[Row] = field(default_factory=list)
    refused: list[tuple[Row, str]] = field(default_factory=list)


def plan(tier: Tier = Tier()) -> Plan:
    """Every pair of values that can meet, in a row that trains; every pair the trainer refuses,
    in a row of its own (the rest at their defaults) that must be refused."""
    axes = factors(tier)
    base = defaults(axes)
    out = Plan(tier, axes)
    wanted: set = set()
    cache: dict[str, str | None] = {}

    def refused(row: Row) -> str | None:
        key = json.dumps(row, sort_keys=True)
        if key not in cache:
            cache[key] = refusal(row, tier)
        return cache[key]

    for a, b in itertools.combinations(axes, 2):
        for va, vb in itertools.product(a.values, b.values):
            pair = {a.name: va, b.name: vb}
            # a pair meets where some mode takes it (a mode's own option needs that mode)
            rows = (
                [{**base, **pair}]
                if "mode" in pair
                else [{**base, "mode": m, **pair} for m in MODES]
            )
            if any(refused(row) is None for row in rows):
                wanted.add(((a.name, va), (b.name, vb)))
                continue
            # refused: in a row of its own where each value alone trains in that mode (a pair of
            # two modes' own options is said by each one's refusal beside another mode)
            for row in rows:
                alone = [{**base, "mode": row["mode"], k: v} for k, v in pair.items()]
                if all(refused(r) is None for r in alone) or "mode" in pair:
                    if all(row != r for r, _ in out.refused):
                        out.refused.append((row, refused(row) or ""))
                    break
    seeds = [{k: v for k, v in seed.items() if k in base} for seed in SEEDS]
    while wanted:
        if seeds:
            fixed = seeds.pop(0)
        else:
            (fa, va), (fb, vb) = min(wanted, key=lambda p: _order(p, axes))
            fixed = {fa: va, fb: vb}
        row = {**base, **fixed}
        for f in axes:
            if f.name in fixed:
                continue
            best, gain = row[f.name], -1
            for v in f.values:
                if (f.name, v) in COSTLY:
                    continue
                trial = {**row, f.name: v}
                if refused(trial) is not None:
                    continue
                new = len(_pairs(trial, axes) & wanted)
                if new > gain:
                    best, gain = v, new
            row[f.name] = best
        assert refused(row) is None, row
        out.trains.append(row)
        wanted -= _pairs(row, axes)
    return out


def _order(pair: tuple, axes: Sequence[Factor]) -> tuple:
    (fa, va), (fb, vb) = pair
    index = {f.name: i for i, f in enumerate(axes)}
    pos = {f.name: {v: j for j, v in enumerate(f.values)} for f in axes}
    return index[fa], pos[fa][va], index[fb], pos[fb][vb]


def donor(row: Row) -> Row:
    """The run whose checkpoint a resuming row reads: another mode (fsdp's sharded checkpoint
    for single, dp and ddp; a single run's for fsdp), the same family and batch, every option
    at its default."""
    other = "single" if row["mode"] == "fsdp" else "fsdp"
    keep = ("family", "validation", "accum_steps")
    return {"mode": other, "resume": "fresh", **{k: row[k] for k in keep if k in row}}


def checkpoint_of(donor_row: Row, donor_dir: Path) -> Path:
    """What a resuming row is given: an fsdp donor's sharded folder, else its last.pt."""
    name = "last.dcp" if donor_row["mode"] == "fsdp" else "last.pt"
    return donor_dir / "checkpoints" / name


@dataclass
class Outcome:
    """What one row did: ``trained``, ``refused`` (one ``error:`` line, nothing written) or
    ``failed``; ``said`` is the refusal's line or the failure's last lines."""

    kind: str
    said: str = ""
    seconds: float = 0.0


def names(p: Plan) -> dict[str, Row]:
    """Each row by its name: ``t<i>`` for those that train, ``r<i>`` for the refused."""
    out = {f"t{i + 1}": row for i, row in enumerate(p.trains)}
    out.update({f"r{i + 1}": row for i, (row, _why) in enumerate(p.refused)})
    return out


def problems(p: Plan, outcomes: dict[str, Outcome]) -> list[str]:
    """Every row whose outcome is not what the plan says: a row to train that did not, a row to
    refuse that was not refused with the trainer's words."""
    said = {f"r{i + 1}": why for i, (_row, why) in enumerate(p.refused)}
    out = []
    for name in names(p):
        got = outcomes[name]
        if name in said and (got.kind != "refused" or got.said != said[name]):
            out.append(f"{name}: should be refused ({said[name]}), was {got.kind}: {got.said}")
        elif name not in said and got.kind != "trained":
            out.append(f"{name}: should train, was {got.kind}: {got.said}")
    out += [f"{n}: donor {o.kind}: {o.said}" for n, o in outcomes.items()
            if n.startswith("donor") and o.kind != "trained"]  # fmt: skip
    return out


# -- the tables -------------------------------------------------------------------------------


def _shown(factor: Factor, value: Any, row: Row) -> str:
    if factor.only_in and row["mode"] != factor.only_in and value == factor.values[0]:
        return "·"
    if value in (None, False):
        return "default" if factor.name in ("precision", "reshard_after_forward") else "off"
    return "on" if value is True else str(value)


def table(p: Plan, outcomes: dict[str, Outcome] | None = None) -> str:
    """The rows as a Markdown table: one row a line, its values (``·``: another mode's option),
    the model it ran and, when run, what it did and in how many seconds."""
    head = ["row", *(f.name.replace("_", " ") for f in p.axes), "model", "expected"]
    if outcomes is not None:
        head += ["outcome", "s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    said = {f"r{i + 1}": why for i, (_row, why) in enumerate(p.refused)}
    for name, row in names(p).items():
        cells = [name, *(_shown(f, row[f.name], row) for f in p.axes), p.tier.model(row["family"])]
        cells.append(f"refused: {said[name]}" if name in said else "trains")
        if outcomes is not None:
            got = outcomes[name]
            cells += [f"{got.kind}: {got.said}", f"{got.seconds:.0f}"]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def combinations(p: Plan) -> str:
    """What combines with what, and why not where it does not: for every pair of factors, the
    pairs of values the trainer refuses with its words; every other pair trains in a row of
    ``table``."""
    lines = [
        f"{len(p.trains)} rows train every pair of values that can meet ({_count(p)} pairs); "
        f"{len(p.refused)} rows are refused before anything starts:",
        "",
        "| refused | because (the trainer's words) |",
        "|---|---|",
    ]
    base = defaults(p.axes)
    for row, why in p.refused:
        changed = ", ".join(
            f"{k.replace('_', ' ')} {_shown(f, row[k], row)}"
            for f in p.axes
            for k in (f.name,)
            if k == "mode" or base[k] != row[k]
        )
        lines.append(f"| {changed} | {why.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def document(p: Plan) -> str:
    """docs/option-matrix.md's generated part: what combines with what, then every row."""
    return f"## The {p.tier.name.upper()} tier\n\n{combinations(p)}\n### Its rows\n\n{table(p)}"


def _count(p: Plan) -> int:
    return len(set().union(*(_pairs(r, p.axes) for r in p.trains))) if p.trains else 0


BEGIN = "<!-- generated by python scripts/option_matrix.py"
END = "<!-- end of the generated part -->"


def write_docs(path: Path, p: Plan) -> None:
    """Put ``document(p)`` between the marker lines of ``path`` (the rest is prose, kept)."""
    text = path.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    marker = f"{BEGIN} --plan --write-docs {path.name} -->"
    path.write_text(f"{head}{marker}\n\n{document(p)}\n{END}{tail}")
