"""``python scripts/option_matrix.py``: the option matrix (``training.matrix``) run for real.

Runs each row of the plan (``training.matrix.plan``) as the trainer (``training.matrix_worker``):
the single and dp rows one after another in one process, the ddp and fsdp rows in one torchrun
job of two ranks, so that the matrix imports torch twice rather than once per row; two rounds,
the donors (whose checkpoints the resuming rows read) and every other row first. Each row's
outcome is read back from its folder (``outcome``), the table printed, and the exit status is 1
when any row did other than the plan says. The suite runs the CPU tier
(tests/test_option_matrix.py); ``scripts/gpu_check.py --matrix`` the GPU tier.

    python scripts/option_matrix.py --plan                  # the rows; runs nothing
    python scripts/option_matrix.py --plan --write-docs docs/option-matrix.md
    python scripts/option_matrix.py --out /tmp/matrix       # the CPU tier, its table
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lab.engine.ports import free_port  # noqa: E402
from training import matrix  # noqa: E402


def _work(
    rows: list[tuple[str, matrix.Row]], tier: matrix.Tier, root: Path, donors: dict
) -> list[dict]:
    """The worker's list: each row's name, trainer argv and folder."""
    out = []
    for name, row in rows:
        folder = root / name
        steps = matrix.STEPS
        extra: list[str] = []
        if row.get("resume") == "other mode":
            d = matrix.donor(row)
            donor_dir = root / donors[json.dumps(d, sort_keys=True)] / "run"
            extra = ["--resume", str(matrix.checkpoint_of(d, donor_dir))]
            steps = matrix.DONOR_STEPS + matrix.STEPS
        out.append({"name": name, "argv": matrix.argv(row, tier, folder / "run", steps) + extra,
                    "folder": str(folder)})  # fmt: skip
    return out


def _launch(
    work: list[dict], torchrun: bool, root: Path, tag: str, tier: matrix.Tier
) -> subprocess.Popen:
    """Start the worker for ``work``: a process, or a torchrun job of ``matrix.RANKS`` ranks."""
    spec = root / f"{tag}.json"
    spec.write_text(json.dumps(work))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # the CPU tier on the CPU even where GPUs are; the GPU tier on two of them (DP included)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, range(matrix.RANKS))) if tier.gpu else ""
    cmd = [sys.executable, "-m", "training.matrix_worker", str(spec)]
    if torchrun:
        port = free_port()
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(matrix.RANKS),
               "--master-port", str(port), "--log-dir", str(root / f"{tag}.torchrun"),
               "-m", "training.matrix_worker", str(spec)]  # fmt: skip
    with open(root / f"{tag}.log", "wb") as log:  # the child keeps its own copy of the file
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip


def _wait(procs: Iterable[subprocess.Popen], deadline: float) -> None:
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


def run(p: matrix.Plan, root: Path, timeout_s: float = 1800) -> dict[str, matrix.Outcome]:
    """Run every row of ``p`` under ``root`` (two rounds: the donors and every row that resumes
    nothing, then the resuming rows); each row's ``Outcome`` by its name (``names``)."""
    named = matrix.names(p)
    donors: dict[str, str] = {}
    first: list[tuple[str, matrix.Row]] = []
    later: list[tuple[str, matrix.Row]] = []
    for name, row in named.items():
        if row.get("resume") == "other mode":
            key = json.dumps(matrix.donor(row), sort_keys=True)
            if key not in donors:
                donors[key] = f"donor{len(donors) + 1}"
                first.append((donors[key], {**matrix.defaults(p.axes), **matrix.donor(row)}))
            later.append((name, row))
        else:
            first.append((name, row))
    deadline = time.monotonic() + timeout_s
    for round_no, rows in enumerate((first, later)):
        procs = []
        for torchrun in (False, True):
            mine = [(n, r) for n, r in rows if (r["mode"] in matrix.TORCHRUN_MODES) == torchrun]
            if mine:
                work = _work(mine, p.tier, root, donors)
                tag = f"round{round_no}-{'torchrun' if torchrun else 'single'}"
                procs.append(_launch(work, torchrun, root, tag, p.tier))
        _wait(procs, deadline)
    return {name: outcome(root / name) for name in [*named, *donors.values()]}


def outcome(folder: Path) -> matrix.Outcome:
    """What the worker recorded for a row (every rank's exit code, its stderr)."""
    codes = [json.loads(f.read_text()) for f in sorted(folder.glob("exit_rank*.json"))]
    if not codes:
        return matrix.Outcome("failed", "never ran (the worker died or ran out of time before it)")
    logs = "\n".join(f.read_text(errors="replace") for f in sorted(folder.glob("rank*.log")))
    seconds = max(c["seconds"] for c in codes)
    errors = sorted({line for line in logs.splitlines() if line.startswith("error: ")})
    run_dir = folder / "run"
    if all(c["code"] == 2 for c in codes) and len(errors) == 1 and "Traceback" not in logs:
        written = [q.name for q in run_dir.iterdir()] if run_dir.exists() else []
        if not written:
            return matrix.Outcome("refused", errors[0][len("error: ") :], seconds)
        return matrix.Outcome("failed", f"refused but wrote {written}", seconds)
    summary = run_dir / "summary.json"
    if all(c["code"] == 0 for c in codes) and summary.is_file():
        s = json.loads(summary.read_text())
        val = (s.get("final") or {}).get("val_loss")
        if s.get("completed") and isinstance(val, (int, float)) and math.isfinite(val):
            return matrix.Outcome("trained", f"{s['steps']} steps, val loss {val:.3g}", seconds)
        return matrix.Outcome(
            "failed", f"summary: completed {s.get('completed')}, val loss {val}", seconds
        )
    tail = [line for line in logs.splitlines() if line.strip()][-6:]
    return matrix.Outcome(
        "failed", f"exit {[c['code'] for c in codes]}: " + " | ".join(tail), seconds
    )


def main(args: Sequence[str] | None = None) -> int:
    """``[--tier cpu|gpu] [--plan] [--out DIR]``: print the plan, or run it and print the table;
    exit 1 when a row did other than planned."""
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(
        prog="python scripts/option_matrix.py", description=__doc__.split("\n")[0]
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
    p = matrix.plan(matrix.Tier(a.tier))
    if a.plan:
        if a.write_docs:
            matrix.write_docs(Path(a.write_docs), p)
        print(matrix.table(p) + "\n" + matrix.combinations(p))
        return 0
    root = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="matrix-"))
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    outcomes = run(p, root, a.timeout)
    text = matrix.table(p, outcomes)
    (root / "table.md").write_text(text)
    print(text)
    wrong = matrix.problems(p, outcomes)
    print(f"{len(outcomes)} rows in {time.monotonic() - t0:.0f} s; table: {root / 'table.md'}")
    for line in wrong:
        print("WRONG", line)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
