"""Refused inputs of ``python -m training.train``: each must exit 2 with one line.

Every case checks the three promises of docs/contracts.md for bad input: a non-zero exit (2),
exactly one line on stderr starting ``error: `` with no traceback (and nothing on stdout), and
nothing left behind (a run folder that did not exist still does not; one the launcher made still
holds only its run.json). Every case runs in-process (``training.train.main``, output read at the
file descriptors), since each trainer process spends seconds importing torch; a few of them, one
of each kind (an option, a torchrun environment, a dataset with a folder the launcher made, the
device) and the missing ``--log-dir`` and ``--help``, also run as real processes, which is where
the exit code, an import-time warning or a traceback would show.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

# imported while collecting: importing torch.distributed runs ldconfig once (a process), which
# only a proc test may start
from training.train import main

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
    "fsdp_without_torchrun": (
        ["--mode", "fsdp"],
        {},
        "python -m torch.distributed.run --nproc-per-node 2 -m training.train --mode fsdp",
    ),
    "lr_zero": (["--lr", "0"], {}, "--lr must be positive"),
    "epochs_zero_no_max_steps": (["--epochs", "0", "--max-steps", "0"], {}, "no --max-steps"),
    "resume_missing_file": (["--resume", "{tmp}/nope.pt"], {}, "no such checkpoint"),
    "resume_not_a_checkpoint": (
        ["--resume", "{tmp}/bogus.pt"],
        {},
        "bogus.pt: cannot read it as a checkpoint",
    ),
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
# the cases that also run as real processes: an option, a torchrun environment, a dataset (with a
# folder the launcher made), the device
AS_PROCESSES = ("batch_zero", "ddp_batch_not_divisible", "missing_dataset", "fp16_on_cpu")


def _jobs(tmp: Path, names) -> tuple[list, dict[str, tuple[Path, Path | None]]]:
    """(name, argv, env) of every run of the cases ``names`` (twice for those that keep an existing
    folder), and each case's (fresh, existing) run folder, under ``tmp``."""
    (tmp / "empty" / "train" / "a").mkdir(parents=True, exist_ok=True)
    (tmp / "empty" / "train" / "b").mkdir(parents=True, exist_ok=True)
    (tmp / "bogus.pt").write_text("not a checkpoint")
    jobs, folders = [], {}
    for name in names:
        argv, env, _ = CASES[name]
        argv = [a.replace("{tmp}", str(tmp)) for a in argv]
        fresh, existing = tmp / f"{name}-fresh", None
        jobs.append((name, ["--log-dir", str(fresh), *FAST, *argv], env))
        if name in KEEP_EXISTING:
            existing = tmp / f"{name}-existing"
            existing.mkdir()
            (existing / "run.json").write_text("{}")
            jobs.append((name, ["--log-dir", str(existing), *FAST, *argv], env))
        folders[name] = (fresh, existing)
    return jobs, folders


def _check(name: str, code: int, out: str, err: str) -> None:
    assert code == 2, (code, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert CASES[name][2] in lines[0], lines[0]
    assert "Traceback" not in err and out == ""


def _left_nothing(fresh: Path, existing: Path | None) -> None:
    assert not fresh.exists(), list(fresh.rglob("*"))
    if existing is not None:
        assert [p.name for p in existing.iterdir()] == ["run.json"]


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
    """Run the cases of AS_PROCESSES (plus, for one, a run folder the launcher already made) as
    trainer processes, two at a time."""
    jobs, folders = _jobs(tmp_path_factory.mktemp("refused"), AS_PROCESSES)
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(lambda job: (job[0], _refuse(job[1], job[2])), jobs))
    return {name: ([r for n, r in done if n == name], *folders[name]) for name in AS_PROCESSES}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_one_line_and_leaves_nothing(name, tmp_path, monkeypatch, capfd):
    jobs, folders = _jobs(tmp_path, [name])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the CPU even on a GPU box, as _refuse
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    for _, argv, env in jobs:
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            before = signal.getsignal(signal.SIGTERM)
            capfd.readouterr()
            try:
                code = main(argv)
            finally:
                signal.signal(signal.SIGTERM, before)  # main's own handler is for its process
            out, err = capfd.readouterr()
        _check(name, code, out, err)
    _left_nothing(*folders[name])


@pytest.mark.proc
@pytest.mark.parametrize("name", AS_PROCESSES)
def test_bad_input_of_a_trainer_process_is_one_line_and_leaves_nothing(refusals, name):
    outs, fresh, existing = refusals[name]
    assert len(outs) == (2 if name in KEEP_EXISTING else 1)
    for res in outs:
        _check(name, res.returncode, res.stdout, res.stderr)
    _left_nothing(fresh, existing)


@pytest.mark.proc
def test_missing_log_dir_is_one_line():
    res = _refuse(["--max-steps", "1"], {})
    assert res.returncode == 2 and res.stderr.splitlines() == [
        "error: the following arguments are required: --log-dir"
    ]


@pytest.mark.proc
def test_help_is_not_an_error():
    res = subprocess.run(
        [sys.executable, "-m", "training.train", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0 and "--log-dir" in res.stdout and res.stderr == ""
