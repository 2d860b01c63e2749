"""Every refusal of the lab's command line: one line on stderr that names the fix, exit status 2,
and nothing written or started. In this process (``lab.cli.main``), on a machine without GPUs
(``cpu_only``) so that "GPU 0 does not exist" holds in the fake-GPU mode too; that a real
``python -m lab`` exits with that status is tests/test_engine_cli.py's."""

from __future__ import annotations

import pytest

from tests.helpers.cli import lab_in_process

REFUSALS = [
    (
        ["launch", "--mode", "ddp", "--nproc", "2", "--batch-size", "33"],
        "batch 33 does not split over 2 processes: use 32 or 34",
    ),
    (["launch", "--gpus", "0,1", "--mode", "dp"], "GPU 0 does not exist"),
    (["launch", "--gpus", "x"], "gpus: 'x' is not a list of GPU numbers"),
    # named as the flag, not the field
    (["launch", "--env", "1X=y"], "env: '1X' is not a variable name"),
    (
        ["launch", "--dry-run", "--mode", "dp", "--nproc", "2"],
        "runs in one process, nproc 2 given",
    ),
    (["launch", "--env", "NOEQUALS"], "is not KEY=VALUE"),
    (["launch", "--name", "bad name!"], "name"),
    (["status", "no-such-run"], "no run 'no-such-run'"),
    (["stop", "../../etc"], "is not a valid run id"),
    (["logs", "no-such-run"], "no run"),
    (["sweep", "--modes", "single,zero3"], "use a comma list of single, dp, ddp, fsdp"),
    (
        ["sweep", "--modes", "single,ddp", "--batch-size", "33"],
        "run 2 (ddp): batch 33 does not split",
    ),
    (
        ["sweep", "--scaling", "medium"],
        "scaling: unknown scaling 'medium': use strong (same global batch) or weak",
    ),
    (
        ["launch", "--profile-steps", "5"],
        "profile-steps: profile steps '5': not A:B in whole steps",
    ),
    (
        ["sweep", "--max-steps", "4", "--profile-steps", "3:9"],
        "stops after max_steps 4: end the window by 5",
    ),
    (["launch", "--bucket-cap-mb", "4"], "bucket-cap-mb: an option of DistributedDataParallel"),
    (["launch", "--mode", "dp", "--static-graph"], "static-graph: an option of"),
    (["launch", "--grad-as-bucket-view"], "mode single has none: use mode ddp"),
    (["launch", "--find-unused-parameters"], "find-unused-parameters: an option of"),
    (["launch", "--mode", "ddp", "--bucket-cap-mb", "-1"], "bucket size -1.0 must be 0"),
    (["launch", "--accum-steps", "3"], "accum-steps: 3 does not divide the batch of 64"),
    (
        ["launch", "--mode", "ddp", "--accum-steps", "3"],
        "3 does not divide the batch of 32 per rank (64 over 2)",
    ),
    (["launch", "--accum-steps", "0"], "accumulation steps 0 must be 1 (none)"),
    (
        ["launch", "--mode", "ddp", "--static-graph", "--accum-steps", "2"],
        "static-graph: DDP's static graph does not work with gradient accumulation",
    ),
    (["launch", "--precision", "fp16"], "precision: fp16 needs CUDA"),
    (["launch", "--precision", "fp8"], "unknown precision 'fp8': use fp32, fp16 or bf16"),
    (["launch", "--amp", "--precision", "bf16"], "amp: the same as precision fp16"),
    (
        ["launch", "--nccl-preset", "fast"],
        "nccl-preset: unknown NCCL preset 'fast': use one of single-node-nvlink",
    ),
]


@pytest.mark.parametrize("args,text", REFUSALS)
def test_a_refusal_is_one_line_exit_2_and_leaves_nothing(runs_dir, cpu_only, capsys, args, text):
    r = lab_in_process(capsys, *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: ") and text in r.stderr, (
        r.stderr
    )
    assert list(runs_dir.iterdir()) == []  # refused before any folder or process
