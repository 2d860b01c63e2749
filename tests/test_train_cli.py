"""Refused inputs: each a real ``python -m training.train`` process that must exit 2 with one line.

Every case runs the trainer as a subprocess and checks the three promises of
docs/contracts.md for bad input: a non-zero exit (2), exactly one line on
stderr starting ``error: `` with no traceback, and nothing left behind (a run
folder that did not exist still does not; one the launcher made still holds
only its run.json). The processes start all at once in a module fixture
because each spends seconds importing torch.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.proc

REPO = Path(__file__).resolve().parent.parent
FAST = ["--image-size", "8", "--max-steps", "2"]

# name -> (extra argv, extra env, a phrase the one line must contain)
CASES: dict[str, tuple[list[str], dict[str, str], str]] = {
    "batch_zero": (["--batch-size", "0"], {}, "--batch-size must be positive"),
    "ddp_batch_not_divisible": (
        ["--mode", "ddp", "--batch-size", "33"],
        {
            "RANK": "0",
            "LOCAL_RANK": "0",
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "1",
        },
        "batch 33 does not split over 2 ranks: use 32 or 34",
    ),
    "unknown_model": (
        ["--model", "vgg99"],
        {},
        "unknown --model 'vgg99': use tinycnn or a name of torchvision",
    ),
    "vit_needs_224": (
        ["--model", "vit_b_16"],
        {},
        "vit_b_16 takes 224x224 images only, --image-size 8 given: use --image-size 224",
    ),
    "alexnet_too_small": (["--model", "alexnet"], {}, "alexnet needs images of at least 63x63"),
    "missing_dataset": (["--dataset", "imagefolder:/nonexistent/images"], {}, "does not exist"),
    "empty_dataset": (["--dataset", "imagefolder:{tmp}/empty"], {}, "holds no images"),
    "unknown_dataset": (["--dataset", "mnist"], {}, "unknown --dataset 'mnist'"),
    "ddp_without_torchrun": (
        ["--mode", "ddp"],
        {},
        "python -m torch.distributed.run --nproc-per-node 2 -m training.train --mode ddp",
    ),
    "lr_zero": (["--lr", "0"], {}, "--lr must be positive"),
    "epochs_zero_no_max_steps": (["--epochs", "0", "--max-steps", "0"], {}, "no --max-steps"),
    "resume_missing_file": (["--resume", "{tmp}/nope.pt"], {}, "no such checkpoint"),
    "batch_bigger_than_dataset": (["--batch-size", "100000"], {}, "fewer than one batch"),
    "cuda_not_visible": (
        ["--device", "cuda"],
        {"CUDA_VISIBLE_DEVICES": ""},
        "no CUDA device is visible",
    ),
    "profile_steps_reversed": (
        ["--profile-steps", "6:3"],
        {},
        "--profile-steps 6:3: B must be greater than A",
    ),
    "profile_steps_not_numbers": (["--profile-steps", "a:b"], {}, "is not A:B in whole steps"),
    "profile_steps_from_zero": (["--profile-steps", "0:2"], {}, "steps count from 1"),
    "profile_steps_past_the_end": (
        ["--profile-steps", "2:5"],
        {},
        "reaches past the run's last step (2): end it at 3",
    ),
    "memory_snapshot_on_cpu": (
        ["--memory-snapshot", "2", "--device", "cpu"],
        {},
        "--memory-snapshot records CUDA memory",
    ),
    # the performance knobs (tests/test_knobs.py checks the rest in-process)
    "bucket_cap_without_ddp": (["--bucket-cap-mb", "4"], {}, "--bucket-cap-mb is an option of"),
    "accum_not_dividing_per_rank": (
        ["--mode", "ddp", "--accum-steps", "3"],
        {
            "RANK": "0",
            "LOCAL_RANK": "0",
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "1",
        },
        "--accum-steps 3 does not divide the batch of 32 per rank",
    ),
    "fp16_on_cpu": (["--precision", "fp16"], {}, "--precision fp16 needs CUDA"),
}


KEEP_EXISTING = {"missing_dataset", "resume_missing_file"}


def _refuse(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    # the CPU even on a GPU box: a refusal's words ("over 2 ranks") are the CPU's
    return subprocess.run(
        [sys.executable, "-m", "training.train", *argv],
        cwd=REPO,
        env={**base, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def refusals(
    tmp_path_factory,
) -> dict[str, tuple[list[subprocess.CompletedProcess], Path, Path | None]]:
    """Run every case (plus, for a few, a run folder the launcher already made) four at a time."""
    tmp = tmp_path_factory.mktemp("refused")
    (tmp / "empty" / "train" / "a").mkdir(parents=True)
    (tmp / "empty" / "train" / "b").mkdir(parents=True)
    jobs, folders = [], {}
    for name, (argv, env, _) in CASES.items():
        argv = [a.replace("{tmp}", str(tmp)) for a in argv]
        fresh, existing = tmp / f"{name}-fresh", None
        jobs.append((name, ["--log-dir", str(fresh), *FAST, *argv], env))
        if name in KEEP_EXISTING:
            existing = tmp / f"{name}-existing"
            existing.mkdir()
            (existing / "run.json").write_text("{}")
            jobs.append((name, ["--log-dir", str(existing), *FAST, *argv], env))
        folders[name] = (fresh, existing)
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = list(pool.map(lambda job: (job[0], _refuse(job[1], job[2])), jobs))
    return {name: ([r for n, r in done if n == name], *folders[name]) for name in CASES}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_one_line_and_leaves_nothing(refusals, name):
    outs, fresh, existing = refusals[name]
    for res in outs:
        assert res.returncode == 2, (res.returncode, res.stderr)
        lines = res.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
        assert CASES[name][2] in lines[0], lines[0]
        assert "Traceback" not in res.stderr and res.stdout == ""
    assert not fresh.exists(), list(fresh.rglob("*"))
    if existing is not None:
        assert [p.name for p in existing.iterdir()] == ["run.json"]


def test_missing_log_dir_is_one_line():
    res = _refuse(["--max-steps", "1"], {})
    assert res.returncode == 2 and res.stderr.splitlines() == [
        "error: the following arguments are required: --log-dir"
    ]


def test_help_is_not_an_error():
    res = subprocess.run(
        [sys.executable, "-m", "training.train", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0 and "--log-dir" in res.stdout and res.stderr == ""
