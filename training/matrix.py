"""The option matrix: every pair of values a user can pick either trains or is refused.

Owns the plan and the verdict of ``python -m training.matrix``. The factors are the mode, the
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

``run`` trains the rows for real (``training.matrix_worker``): the single and dp rows one after
another in one process, the ddp and fsdp rows in one torchrun job of two ranks, so that the
matrix pays for importing torch twice rather than once per row; ``table`` writes the outcome
of each as Markdown, and ``combinations`` the table of what combines with what (docs/matrix.md
is generated from it). The CPU tier (``Tier("cpu")``) is what this machine can run, in the
suite; ``scripts/gpu_check.py --matrix`` runs the GPU tier (fp16, CPU offload, sync BatchNorm,
NCCL, the torchvision models at their sizes) on a machine with two GPUs or more.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable, Sequence

from training.options import KNOBS

MODES = ("single", "dp", "ddp", "fsdp")
TORCHRUN_MODES = ("ddp", "fsdp")
RANKS = 2  # ddp and fsdp rows: two ranks (gloo on the CPU, NCCL on two GPUs)
# family: (the CPU tier's model, the GPU tier's model): the same blocks, at a size each can run
FAMILIES = {
    "plain CNN": ("tinycnn", "tinycnn"),
    "BatchNorm": ("resnet18", "resnet18"),
    "LayerNorm": ("tinyvit", "vit_b_16"),
    "depthwise + SE": ("mobilenet_v3_small", "mobilenet_v3_small"),
    "stochastic depth": ("tinyconvnext", "convnext_tiny"),
}
VALIDATION = ("even", "uneven")  # micro-batches of EVEN_MICRO or UNEVEN_MICRO images per device
EVEN_MICRO = 16
UNEVEN_MICRO = 59  # 355 digits over 2 ranks: 178 and 177 images, 4 and 3 forwards
RESUME = ("fresh", "other mode")
STEPS = 3  # optimizer steps a row trains (a resuming row: DONOR_STEPS more after its donor's)
DONOR_STEPS = 2
LR = "0.01"


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
    while wanted:
        (fa, va), (fb, vb) = min(wanted, key=lambda p: _order(p, axes))
        row = {**base, fa: va, fb: vb}
        for f in axes:
            if f.name in (fa, fb):
                continue
            best, gain = row[f.name], -1
            for v in f.values:
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


# -- running it -------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one row did: ``trained``, ``refused`` (one ``error:`` line, nothing written) or
    ``failed``; ``said`` is the refusal's line or the failure's last lines."""

    kind: str
    said: str = ""
    seconds: float = 0.0


def _work(rows: list[tuple[str, Row]], tier: Tier, root: Path, donors: dict) -> list[dict]:
    """The worker's list: each row's name, trainer argv and folder."""
    out = []
    for name, row in rows:
        folder = root / name
        steps = STEPS
        extra: list[str] = []
        if row.get("resume") == "other mode":
            d = donor(row)
            extra = [
                "--resume",
                str(checkpoint_of(d, root / donors[json.dumps(d, sort_keys=True)])),
            ]
            steps = DONOR_STEPS + STEPS
        out.append({"name": name, "argv": argv(row, tier, folder / "run", steps) + extra,
                    "folder": str(folder)})  # fmt: skip
    return out


def _launch(work: list[dict], torchrun: bool, root: Path, tag: str, tier: Tier) -> subprocess.Popen:
    """Start the worker for ``work``: a process, or a torchrun job of ``RANKS`` ranks."""
    spec = root / f"{tag}.json"
    spec.write_text(json.dumps(work))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # the CPU tier on the CPU even where GPUs are; the GPU tier on two of them (DP included)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, range(RANKS))) if tier.gpu else ""
    cmd = [sys.executable, "-m", "training.matrix_worker", str(spec)]
    if torchrun:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(RANKS),
               "--master-port", str(port), "--log-dir", str(root / f"{tag}.torchrun"),
               "-m", "training.matrix_worker", str(spec)]  # fmt: skip
    log = open(root / f"{tag}.log", "wb")
    repo = Path(__file__).resolve().parent.parent
    return subprocess.Popen(cmd, cwd=repo, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip


def _wait(procs: Iterable[subprocess.Popen], deadline: float) -> None:
    import signal

    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    p.wait(timeout=10)
                    break
                except subprocess.TimeoutExpired:
                    continue


def run(p: Plan, root: Path, timeout_s: float = 1800) -> dict[str, Outcome]:
    """Run every row of ``p`` under ``root`` (two rounds: the donors and every row that resumes
    nothing, then the resuming rows); each row's ``Outcome`` by its name (``names``)."""
    named = names(p)
    donors: dict[str, str] = {}
    first: list[tuple[str, Row]] = []
    later: list[tuple[str, Row]] = []
    for name, row in named.items():
        if row.get("resume") == "other mode":
            key = json.dumps(donor(row), sort_keys=True)
            if key not in donors:
                donors[key] = f"donor{len(donors) + 1}"
                first.append((donors[key], {**defaults(p.axes), **donor(row)}))
            later.append((name, row))
        else:
            first.append((name, row))
    deadline = time.monotonic() + timeout_s
    for round_no, rows in enumerate((first, later)):
        procs = []
        for torchrun in (False, True):
            mine = [(n, r) for n, r in rows if (r["mode"] in TORCHRUN_MODES) == torchrun]
            if mine:
                work = _work(mine, p.tier, root, donors)
                tag = f"round{round_no}-{'torchrun' if torchrun else 'single'}"
                procs.append(_launch(work, torchrun, root, tag, p.tier))
        _wait(procs, deadline)
    return {name: outcome(root / name) for name in [*named, *donors.values()]}


def names(p: Plan) -> dict[str, Row]:
    """Each row by its name: ``t<i>`` for those that train, ``r<i>`` for the refused."""
    out = {f"t{i + 1}": row for i, row in enumerate(p.trains)}
    out.update({f"r{i + 1}": row for i, (row, _why) in enumerate(p.refused)})
    return out


def outcome(folder: Path) -> Outcome:
    """What the worker recorded for a row (every rank's exit code, its stderr)."""
    codes = [json.loads(f.read_text()) for f in sorted(folder.glob("exit_rank*.json"))]
    if not codes:
        return Outcome("failed", "never ran (the worker died or ran out of time before it)")
    logs = "\n".join(f.read_text(errors="replace") for f in sorted(folder.glob("rank*.log")))
    seconds = max(c["seconds"] for c in codes)
    errors = sorted({line for line in logs.splitlines() if line.startswith("error: ")})
    run_dir = folder / "run"
    if all(c["code"] == 2 for c in codes) and len(errors) == 1 and "Traceback" not in logs:
        written = [q.name for q in run_dir.iterdir()] if run_dir.exists() else []
        if not written:
            return Outcome("refused", errors[0][len("error: ") :], seconds)
        return Outcome("failed", f"refused but wrote {written}", seconds)
    summary = run_dir / "summary.json"
    if all(c["code"] == 0 for c in codes) and summary.is_file():
        s = json.loads(summary.read_text())
        val = (s.get("final") or {}).get("val_loss")
        if s.get("completed") and isinstance(val, (int, float)) and math.isfinite(val):
            return Outcome("trained", f"{s['steps']} steps, val loss {val:.3g}", seconds)
        return Outcome(
            "failed", f"summary: completed {s.get('completed')}, val loss {val}", seconds
        )
    tail = [line for line in logs.splitlines() if line.strip()][-6:]
    return Outcome("failed", f"exit {[c['code'] for c in codes]}: " + " | ".join(tail), seconds)


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


BEGIN, END = "<!-- generated by python -m training.matrix", "<!-- end of the generated part -->"


def write_docs(path: Path, p: Plan) -> None:
    """Put ``document(p)`` between the marker lines of ``path`` (the rest is prose, kept)."""
    text = path.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    marker = f"{BEGIN} --plan --write-docs {path.name} -->"
    path.write_text(f"{head}{marker}\n\n{document(p)}\n{END}{tail}")


def main(args: Sequence[str] | None = None) -> int:
    """``python -m training.matrix [--tier cpu|gpu] [--plan] [--out DIR]``: print the plan, or run
    it and print the table; exit 1 when a row did other than planned."""
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(
        prog="python -m training.matrix", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--tier", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument(
        "--plan", action="store_true", help="print the rows and the refusals; run nothing"
    )
    ap.add_argument("--out", default=None, help="keep the rows' run folders and table.md here")
    ap.add_argument(
        "--write-docs",
        metavar="FILE",
        default=None,
        help="with --plan: write the tier's tables"
        " into FILE between its two marker lines (docs/option-matrix.md)",
    )
    ap.add_argument("--timeout", type=float, default=3600, help="seconds for the whole matrix")
    a = ap.parse_args(args)
    p = plan(Tier(a.tier))
    if a.plan:
        if a.write_docs:
            write_docs(Path(a.write_docs), p)
        print(table(p) + "\n" + combinations(p))
        return 0
    root = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="matrix-"))
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    outcomes = run(p, root, a.timeout)
    text = table(p, outcomes)
    (root / "table.md").write_text(text)
    print(text)
    wrong = problems(p, outcomes)
    print(f"{len(outcomes)} rows in {time.monotonic() - t0:.0f} s; table: {root / 'table.md'}")
    for line in wrong:
        print("WRONG", line)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
