"""The failure signatures the seeds quote, in lab/engine/supervise/diagnose.py (issue 12, section
2).

REAL, triggered on this machine side by side: DDP over a model with a layer
its forward never uses (a user-style script under torchrun, 2 gloo ranks);
a collective timeout (the real trainer under torchrun with --dist-timeout
10, rank 1 frozen with SIGSTOP once training runs, so rank 0's all-reduce
hits gloo's own timeout); DDP given device_ids for a CPU model (a user-style
script under torchrun); --resume of a checkpoint saved from a wrapped model
(the real trainer, run as the lab runs single mode), and PyTorch's own
load_state_dict error for the same mistake in a user's script.
CAPTURED TEXT, because they need GPUs, NCCL or another machine: duplicate_gpu,
driver_too_old and dp_scatter_sizes (as PyTorch and NCCL print them, from
public issue threads), NCCL's watchdog form of collective_timeout and the GPU
forms of bad_device_ids. address_unavailable wraps the real errno text of a
local bind to a non-local address (binding sends nothing) in torchrun's frame.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from torch import nn

from lab.engine.supervise.diagnose import diagnose
from lab.runfolder import REPO_ROOT
from tests.helpers.diagnose import ROOT_CAUSE, _captured, _free, _torchrun
from training import models

UNUSED_LAYER = """
import torch, torch.distributed as dist
from torch import nn
dist.init_process_group("gloo")
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(4, 2)
        self.unused = nn.Linear(4, 2)  # never called in forward
    def forward(self, x):
        return self.used(x)
model = nn.parallel.DistributedDataParallel(Net())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    opt.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
dist.destroy_process_group()
"""

CPU_MODEL_WITH_DEVICE_IDS = """
import os, torch.distributed as dist
from torch import nn
dist.init_process_group("gloo")
rank = int(os.environ["LOCAL_RANK"])
model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2), device_ids=[rank])
"""

TIMEOUT_S = 10  # long enough that ranks starting a few seconds apart under load still meet


def _rank_process(torchrun: subprocess.Popen, rank: int) -> psutil.Process | None:
    for child in psutil.Process(torchrun.pid).children(recursive=True):
        try:
            if child.environ().get("RANK") == str(rank):
                return child
        except psutil.Error:
            continue
    return None


def _freeze_rank_1_once_training(run_dir: Path, job: subprocess.Popen) -> None:
    """SIGSTOP rank 1 after the first logged step, and SIGCONT it once rank 0 has ended of its
    timeout (or given up on). Thawed as soon as rank 0 printed its timeout, rank 1 timed out too
    at once (its own wait had run as long) and could write its error file first: torchrun then
    named rank 1 (a fresh clone's CI, 2026-12-03). Once rank 0 has exited, its error file is
    written, so rank 0 is the first failure, as in a real hang."""
    deadline = time.monotonic() + 180
    while (
        not (run_dir / "progress.json").exists()
        and job.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.2)
    rank0, rank1 = _rank_process(job, 0), _rank_process(job, 1)
    assert rank0 is not None and rank1 is not None and job.poll() is None, (
        run_dir / "stdout.log"
    ).read_text()[-2000:]
    rank1.send_signal(signal.SIGSTOP)
    try:
        # rank 0 times out after TIMEOUT_S and exits; a zombie has exited too
        rank0.wait(timeout=TIMEOUT_S + 60)
    except psutil.TimeoutExpired:
        pass
    finally:
        # torchrun can then end rank 1 at once instead of waiting to SIGKILL it (if it has not)
        with contextlib.suppress(psutil.NoSuchProcess):
            rank1.send_signal(signal.SIGCONT)


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """The real failures, started together; yields {name: (run_dir, exit code)}."""
    root = tmp_path_factory.mktemp("seeds")
    for name, text in (("unused.py", UNUSED_LAYER), ("device_ids.py", CPU_MODEL_WITH_DEVICE_IDS)):
        (root / name).write_text(text)
    trainer = [
        "-m",
        "training.train",
        "--mode",
        "ddp",
        "--epochs",
        "1000",
        "--batch-size",
        "16",
        "--device",
        "cpu",
        "--checkpoint",
        "none",
        "--log-every",
        "1",
        "--dist-timeout",
        str(TIMEOUT_S),
    ]
    jobs = {
        "unused": (
            root / "unused",
            _torchrun(root / "unused", _free(), 2, [str(root / "unused.py")]),
        ),
        "device_ids": (
            root / "device_ids",
            _torchrun(root / "device_ids", _free(), 1, [str(root / "device_ids.py")]),
        ),
        "timeout": (
            root / "timeout",
            _torchrun(root / "timeout", _free(), 2, trainer + ["--log-dir", str(root / "timeout")]),
        ),
        "prefix": (root / "prefix", _trainer_resuming_a_wrapped_checkpoint(root)),
    }
    try:
        _freeze_rank_1_once_training(root / "timeout", jobs["timeout"][1])
        yield {name: (d, p.wait(timeout=180)) for name, (d, p) in jobs.items()}
    finally:
        for _, p in jobs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def _wrapped_checkpoint(path: Path) -> None:
    """A checkpoint in the trainer's format whose model was saved from its DataParallel wrapper."""
    # no GPU: the wrapper only renames the keys
    wrapped = nn.DataParallel(models.build("tinycnn", 3, 10))
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.1, momentum=0.9)
    torch.save(
        {"model": wrapped.state_dict(), "optimizer": opt.state_dict(), "step": 3, "epoch": 0}, path
    )


def _trainer_resuming_a_wrapped_checkpoint(root: Path) -> subprocess.Popen:
    """The trainer as the lab starts single mode: one process, its output in RUN/stdout.log."""
    run = root / "prefix"
    run.mkdir()
    _wrapped_checkpoint(root / "wrapped.pt")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    with open(run / "stdout.log", "wb") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "training.train",
                "--dataset",
                "synthetic",
                "--image-size",
                "8",
                "--resume",
                str(root / "wrapped.pt"),
                "--log-dir",
                str(run),
                "--device",
                "cpu",
            ],
            env=env,
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@pytest.mark.proc
def test_real_unused_parameter_under_ddp(real):
    d, rc = real["unused"]
    assert rc != 0
    diag = diagnose(d, rc)
    assert diag.key == "unused_parameters", (diag, (d / "stdout.log").read_text()[-1500:])
    assert diag.rank in (0, 1) and diag.exit_code == 1
    assert "find_unused_parameters=True" in diag.fix and "not use" in diag.cause
    assert "Expected to have finished reduction" in diag.excerpt


@pytest.mark.proc
def test_real_collective_timeout_from_the_trainers_dist_timeout(real):
    d, rc = real["timeout"]
    assert rc != 0
    diag = diagnose(d, rc)
    assert diag.key == "collective_timeout", (diag, (d / "stdout.log").read_text()[-2000:])
    # rank 0 is the one that timed out waiting for the frozen rank 1, after --dist-timeout, not
    # gloo's 30 minutes
    assert diag.rank == 0 and f"Timed out waiting {TIMEOUT_S * 1000}ms" in diag.excerpt
    assert "--dist-timeout" in diag.fix and "another rank" in diag.cause


@pytest.mark.proc
def test_real_device_ids_for_a_cpu_model(real):
    d, rc = real["device_ids"]
    assert rc != 0
    diag = diagnose(d, rc)
    assert diag.key == "bad_device_ids", (diag, (d / "stdout.log").read_text()[-1500:])
    assert diag.rank == 0 and "none on the CPU" in diag.fix


@pytest.mark.proc
def test_real_resume_of_a_wrapped_models_checkpoint(real):
    d, rc = real["prefix"]
    assert rc == 2  # the trainer's refusal: one line, nothing trained
    out = (d / "stdout.log").read_text()
    line = [ln for ln in out.splitlines() if ln.startswith("error: ")]
    assert len(line) == 1 and "Traceback" not in out, out
    assert "only by the 'module.' prefix" in line[0] and "model.module.state_dict()" in line[0]
    diag = diagnose(d, rc)
    assert diag.key == "state_dict_prefix" and diag.rank is None and diag.exit_code == 2
    assert "removeprefix('module.')" in diag.fix and "only by the 'module.' prefix" in diag.excerpt
    assert not (d / "tb").exists() and not (d / "checkpoints").exists()


def test_real_load_state_dict_error_of_a_users_script(tmp_path):
    wrapped = nn.DataParallel(models.build("tinycnn", 1, 10))
    with pytest.raises(RuntimeError) as err:
        models.build("tinycnn", 1, 10).load_state_dict(wrapped.state_dict())
    text = (
        'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n'
        f"RuntimeError: {err.value}"
    )
    diag = diagnose(
        _captured(tmp_path, ROOT_CAUSE.format(err=text.replace("\n", "\n[default0]:[rank0]: "))), 1
    )
    assert diag.key == "state_dict_prefix" and diag.rank == 0
    assert "Missing key(s)" in diag.excerpt


def test_a_real_layer_mismatch_is_not_called_a_prefix(tmp_path):
    """Keys that still differ once 'module.' is stripped are another model, not a wrapper."""
    wrapped = nn.DataParallel(models.build("resnet18", 3, 10))
    with pytest.raises(RuntimeError) as err:
        models.build("tinycnn", 3, 10).load_state_dict(wrapped.state_dict())
    diag = diagnose(_captured(tmp_path, ROOT_CAUSE.format(err=f"RuntimeError: {err.value}")), 1)
    assert diag.key == "rank_crashed"


# CAPTURED frame around a real errno text
def test_address_unavailable_from_the_real_errno_text(tmp_path):
    import socket

    with socket.socket() as s, pytest.raises(OSError) as err:
        # not an address of this machine: the kernel refuses, nothing is sent
        s.bind(("10.255.255.1", 0))
    assert err.value.errno == 99
    diag = diagnose(_captured(tmp_path, ROOT_CAUSE.format(err=f"OSError: {err.value}")), 1)
    assert diag.key == "address_unavailable" and diag.rank == 0
    assert "not an address of this machine" in diag.cause and "127.0.0.1" in diag.fix


def test_a_clients_retried_connect_with_errno_99_is_not_the_address(tmp_path):
    warning = (
        "[W socket.cpp:558] [c10d] The client socket has failed to connect to [localhost]:29500 "
        "(errno: 99 - Cannot assign requested address).\nRuntimeError: boom"
    )
    assert diagnose(_captured(tmp_path, ROOT_CAUSE.format(err=warning)), 1).key == "rank_crashed"


# CAPTURED: what PyTorch and NCCL print on GPU machines (public issue threads); none can happen here
CAPTURED = {
    "duplicate_gpu": (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1691, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL "
        "version "
        "2.19.3\nncclInvalidUsage: This usually reflects invalid usage of NCCL library.\nLast "
        "error:\n"
        "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 2000"
    ),
    "driver_too_old": (
        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040). Please "
        "update your GPU driver by downloading and installing a new version from the URL: "
        "http://www.nvidia.com/Download/index.aspx Alternatively, go to: https://pytorch.org to "
        "install a PyTorch version that has been compiled with your version of the CUDA driver."
    ),
    "dp_scatter_sizes": (
        '  File "torch/nn/parallel/data_parallel.py", line 200, in gather\n'
        "RuntimeError: Sizes of tensors must match except in dimension 0. Expected size 10 but got "
        "size 11 for tensor number 1 in the list."
    ),
    "collective_timeout": (
        "[rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, "
        "NumelOut=9801523, Timeout(ms)=600000) ran for 600020 milliseconds before timing out."
    ),
    "bad_device_ids": (
        "RuntimeError: module must have its parameters and buffers on device cuda:0 "
        "(device_ids[0]) "
        "but found one of them on device: cuda:1"
    ),
}


@pytest.mark.parametrize("key", sorted(CAPTURED))
def test_captured_gpu_signatures(tmp_path, key):
    diag = diagnose(_captured(tmp_path, ROOT_CAUSE.format(err=CAPTURED[key])), 1)
    assert diag.key == key, diag
    assert diag.rank == 0 and diag.exit_code == 1 and diag.cause and diag.fix


def test_captured_invalid_device_ordinal_is_bad_device_ids(tmp_path):  # CAPTURED: no GPU here
    err = (
        "torch.AcceleratorError: CUDA error: invalid device ordinal\nCUDA kernel errors might be "
        "asynchronously "
        "reported at some other API call, so the stacktrace below might be incorrect."
    )
    assert diagnose(_captured(tmp_path, ROOT_CAUSE.format(err=err)), 1).key == "bad_device_ids"


def test_driver_warning_then_the_trainers_refusal_is_the_driver(tmp_path):  # CAPTURED: no GPU here
    text = (
        "/usr/lib/python3/dist-packages/torch/cuda/__init__.py:124: UserWarning: CUDA "
        "initialization: The NVIDIA "
        "driver on your system is too old (found version 11000).\n"
        "error: --device cuda but no CUDA device is visible: use --device cpu or auto\n"
    )
    diag = diagnose(_captured(tmp_path, text), 2)
    assert diag.key == "driver_too_old" and "Update the NVIDIA driver" in diag.fix


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "soon"])
def test_the_trainer_refuses_a_dist_timeout_that_is_not_a_positive_number(value):
    from training.cli import BadInput, parse_args

    with pytest.raises(BadInput) as err:
        parse_args(["--log-dir", "/tmp/x", "--dist-timeout", value])
    assert "--dist-timeout" in str(err.value) and "\n" not in str(err.value)
    assert parse_args(["--log-dir", "/tmp/x", "--dist-timeout", "2.5"]).dist_timeout == 2.5
    assert parse_args(["--log-dir", "/tmp/x"]).dist_timeout is None  # PyTorch's own default


def test_the_trainers_misfit_message_names_the_prefix_only_when_it_is_the_difference():
    from training.checkpoint import misfit, prefix_only

    plain = models.build("tinycnn", 3, 10).state_dict()
    wrapped = nn.DataParallel(models.build("tinycnn", 3, 10)).state_dict()
    assert (
        prefix_only(plain, wrapped)
        and prefix_only(wrapped, plain)
        and not prefix_only(plain, plain)
    )
    err = RuntimeError("Error(s) in loading state_dict for TinyCNN:\n\tMissing key(s) ...")
    carry = misfit(err, plain, wrapped, "tinycnn")
    assert (
        "carry a 'module.' prefix" in carry
        and "only by the 'module.' prefix" in carry
        and "\n" not in carry
    )
    assert "lack the 'module.' prefix" in misfit(err, wrapped, plain, "tinycnn")
    other = misfit(err, plain, models.build("resnet18", 3, 10).state_dict(), "tinycnn")
    assert (
        other
        == "--resume: checkpoint does not fit --model tinycnn on this data (Error(s) in loading "
        "state_dict for TinyCNN:)"
    )
