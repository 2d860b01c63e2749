"""lab/engine/supervise/diagnose.py against real failures where this machine can produce them.

Real (triggered here, all at once to save time): a port clash (torchrun on a
port we hold), an exception raised in rank 1 of a tiny torchrun job, and a
batch that does not split (the real trainer under torchrun). The killed rank
(kill -9) is produced for real in tests/test_engine_runs.py. CAPTURED TEXT,
because this machine has no GPU: CUDA out of memory, NCCL errors and tensors
on different devices use log lines as PyTorch prints them.
"""

from __future__ import annotations

import os
import socket

import pytest

from lab.engine.supervise.diagnose import diagnose
from tests.helpers.diagnose import ROOT_CAUSE, _captured, _free, _torchrun

RAISE_IN_RANK1 = """
import torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise RuntimeError("boom in rank 1")
dist.barrier()
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def real_failures(tmp_path_factory):
    """Trigger the three real failures side by side; yield {name: (run_dir, exit code)}."""
    root = tmp_path_factory.mktemp("diag")
    script = root / "raise_in_rank1.py"
    script.write_text(RAISE_IN_RANK1)
    held = socket.socket()
    held.bind(("0.0.0.0", 0))
    held.listen()
    busy_port = held.getsockname()[1]
    jobs = {}
    try:
        jobs["port"] = (root / "port", _torchrun(root / "port", busy_port, 1, [str(script)]))
        jobs["raise"] = (root / "raise", _torchrun(root / "raise", _free(), 2, [str(script)]))
        jobs["batch"] = (
            root / "batch",
            _torchrun(
                root / "batch",
                _free(),
                2,
                [
                    "-m",
                    "training.train",
                    "--mode",
                    "ddp",
                    "--batch-size",
                    "33",
                    "--max-steps",
                    "1",
                    "--image-size",
                    "8",
                    "--log-dir",
                    str(root / "batch"),
                    "--device",
                    "cpu",
                    "--checkpoint",
                    "none",
                ],
            ),
        )
        out = {}
        for name, (d, p) in jobs.items():
            out[name] = (d, p.wait(timeout=180))
        yield out
    finally:
        held.close()
        for _, p in jobs.values():
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()


@pytest.mark.proc
def test_real_port_clash(real_failures):
    d, rc = real_failures["port"]
    assert rc != 0
    diag = diagnose(d, rc)
    assert diag.key == "port_in_use", (diag, (d / "stdout.log").read_text()[-1500:])
    assert "port" in diag.cause and "free port" in diag.fix
    assert "address already in use" in diag.excerpt.lower() or "EADDRINUSE" in diag.excerpt


@pytest.mark.proc
def test_real_exception_in_one_rank_names_rank_exit_code_and_traceback(real_failures):
    d, rc = real_failures["raise"]
    assert rc == 1
    diag = diagnose(d, rc)
    assert diag.key == "rank_crashed" and diag.rank == 1 and diag.exit_code == 1
    assert "Rank 1 crashed with exit code 1: RuntimeError: boom in rank 1" == diag.cause
    assert diag.excerpt.startswith("Traceback") and diag.excerpt.endswith(
        "RuntimeError: boom in rank 1"
    )
    assert "--rank 1" in diag.fix
    # the fix names this run, ready to paste, not a placeholder
    assert f"python -m lab logs {d.name} --rank 1" in diag.fix and " RUN " not in diag.fix


@pytest.mark.proc
def test_real_batch_that_does_not_split(real_failures):
    d, rc = real_failures["batch"]
    assert rc != 0
    diag = diagnose(d, rc)
    assert diag.key == "batch_split", (diag, (d / "stdout.log").read_text()[-1500:])
    assert "does not split" in diag.excerpt and "multiple" in diag.fix


def test_captured_cuda_out_of_memory(tmp_path):  # CAPTURED: no GPU here
    err = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of "
        "79.10 GiB of which 1.19 GiB is free."
    )
    diag = diagnose(_captured(tmp_path, ROOT_CAUSE.format(err=err)), 1)
    assert diag.key == "cuda_oom" and diag.rank == 0 and "batch size" in diag.fix


def test_captured_nccl_error(tmp_path):  # CAPTURED: no GPU here
    err = (
        "torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5"
    )
    diag = diagnose(_captured(tmp_path, ROOT_CAUSE.format(err=err)), 1)
    assert diag.key == "nccl" and "NCCL_DEBUG=INFO" in diag.fix


def test_captured_tensors_on_different_devices(tmp_path):  # CAPTURED: no GPU here
    err = (
        "RuntimeError: Expected all tensors to be on the same device, but found at least two "
        "devices, "
        "cuda:0 and cpu! (when checking argument for argument target in method "
        "wrapper_CUDA_nll_loss_forward)"
    )
    diag = diagnose(_captured(tmp_path, ROOT_CAUSE.format(err=err)), 1)
    assert diag.key == "different_devices" and "criterion" in diag.fix


def test_single_process_killed_by_signal_9_points_at_host_memory(tmp_path):
    diag = diagnose(_captured(tmp_path, "step 10/100 loss 2.1\n"), -9)
    assert diag.key == "killed" and "out of memory" in diag.cause and diag.exit_code == -9


# torchrun's summary when rank 1 is kill -9'd mid all-reduce (recorded here with torch 2.14 and
# gloo), with the order torchrun prints under load: rank 0 raised "Connection reset by peer" and
# exited before torchrun polled rank 1, so rank 0 is its "first observed failure"
PEER_LOST = """k.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-02_02:56:34
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 10577)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 10577
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_02:56:34
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : {code} (pid: 10576)
  error_file: /tmp/torchelastic_p9c8c9u0/attempt_0/0/error.json
  traceback : Traceback (most recent call last):
    File "/tmp/k9/k.py", line 9, in main
      dist.all_reduce(t)
  {error}
============================================================
"""
RESET = (
    "RuntimeError: [third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error "
    "[127.0.0.1]:34706: Connection reset by peer."
)


def test_a_rank_killed_by_signal_9_is_the_cause_when_torchrun_names_the_peer_it_cut_off(
    tmp_path,
):
    diag = diagnose(_captured(tmp_path, PEER_LOST.format(code=1, error=RESET)), 1)
    assert (diag.key, diag.rank, diag.exit_code) == ("killed", 1, -9), diag
    assert diag.cause.startswith("Rank 1 ")
    # a fresh clone's CI run (test_stop_and_kill9_of_real_ddp_runs): torchrun's teardown SIGTERM
    # reached rank 0 while it was failing from the lost peer, so its entry read -15
    torn = PEER_LOST.format(code="-15", error=RESET).replace(
        "exitcode  : -15 (pid: 10576)", "exitcode  : -15 (pid: 10576)  (SIGTERM)"
    )
    diag = diagnose(_captured(tmp_path, torn), 1)
    assert (diag.key, diag.rank, diag.exit_code) == ("killed", 1, -9), diag


def test_a_rank_killed_in_torchruns_teardown_does_not_hide_the_real_error(tmp_path):
    # rank 0 failed on its own; rank 1 hung and was SIGKILLed by torchrun's teardown
    err = "ValueError: Expected input batch_size (64) to match target batch_size (32)."
    diag = diagnose(_captured(tmp_path, PEER_LOST.format(code=1, error=err)), 1)
    assert diag.rank == 0 and diag.key != "killed", diag


# torchrun's summary of a real collective timeout (tests/test_diagnose_seeds.py, recorded in a CI
# run here with torch 2.14 and gloo, shortened): rank 0 timed out waiting for the SIGSTOPped rank
# 1, which woke to "Connection closed by peer" and exited first, so torchrun named rank 1
STALLED_PEER = """training.train FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-02_07:47:34
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 8751)
  error_file: /tmp/seeds0/timeout/logs/none_i1lj6_jq/attempt_0/0/error.json
  traceback : Traceback (most recent call last):
    File "/tmp/ci/training/knobs.py", line 107, in forward_backward
      loop.scaler.scale(loss / n if n > 1 else loss).backward()
  RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] \
Timed out waiting 10000ms for recv operation to complete
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_07:47:33
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 8752)
  error_file: /tmp/seeds0/timeout/logs/none_i1lj6_jq/attempt_0/1/error.json
  traceback : Traceback (most recent call last):
    File "/tmp/ci/training/knobs.py", line 107, in forward_backward
      loop.scaler.scale(loss / n if n > 1 else loss).backward()
  RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection \
closed by peer [127.0.0.1]:49818. This is typically caused by a remote worker crashing.
============================================================
"""


def test_the_rank_that_timed_out_is_the_cause_when_torchrun_names_the_peer_that_woke(tmp_path):
    diag = diagnose(_captured(tmp_path, STALLED_PEER), 1)
    assert (diag.key, diag.rank, diag.exit_code) == ("collective_timeout", 0, 1), diag
    # the second CI run: torchrun's teardown SIGTERM reached rank 0 while it was still exiting
    # after its timeout, so its entry reads -15 with the timeout's traceback
    sigterm = STALLED_PEER.replace("exitcode  : 1 (pid: 8751)", "exitcode  : -15 (pid: 8751)")
    diag = diagnose(_captured(tmp_path, sigterm), 1)
    assert (diag.key, diag.rank, diag.exit_code) == ("collective_timeout", 0, -15), diag
    # the same summary with rank 1 the one that timed out: the entries, not their order, decide
    swapped = STALLED_PEER.replace("rank      : 0 (local_rank: 0)", "rank      : 9 (local_rank: 9)")
    swapped = swapped.replace("rank      : 1 (local_rank: 1)", "rank      : 0 (local_rank: 0)")
    assert diagnose(_captured(tmp_path, swapped), 1).rank == 9


def test_without_error_files_the_ranks_own_logs_tell_who_lost_a_peer(tmp_path):
    # RAISE_IN_RANK1 when rank 0's barrier fails first: neither entry shows a traceback (the
    # script has no @record), so each rank's own log says who raised and who lost its peer
    entry = (
        "[{n}]:\n  time      : 2026-12-02_07:47:3{n}\n  host      : localhost\n"
        "  rank      : {r} (local_rank: {r})\n  exitcode  : 1 (pid: 100{r})\n"
        "  error_file: <N/A>\n"
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
        "\n"
    )
    summary = (
        "raise_in_rank1.py FAILED\n"
        + "-" * 60
        + "\nFailures:\n"
        + entry.format(n=1, r=1)
        + "-" * 60
        + "\nRoot Cause (first observed failure):\n"
        + entry.format(n=0, r=0)
        + "=" * 60
        + "\n"
    )
    own = {
        0: f"Traceback (most recent call last):\n  dist.barrier()\n{RESET}\n",
        1: "Traceback (most recent call last):\nRuntimeError: boom in rank 1\n",
    }
    for rank, text in own.items():
        folder = tmp_path / "logs" / "none_x" / "attempt_0" / str(rank)
        folder.mkdir(parents=True)
        (folder / "stderr.log").write_text(text)
    diag = diagnose(_captured(tmp_path, summary), 1)
    assert (diag.key, diag.rank) == ("rank_crashed", 1), diag
    assert "boom in rank 1" in diag.cause


def test_torchrun_error_file_message_is_used(tmp_path):
    err = {
        "message": {
            "message": "ValueError: bad shape",
            "extraInfo": {
                "py_callstack": "Traceback (most recent call last):\n  File x\nValueError: bad "
                "shape"
            },
        },
        "rank": 3,
    }
    diag = diagnose(_captured(tmp_path, "", err), 1)
    assert diag.rank == 3 and diag.key == "rank_crashed" and "ValueError: bad shape" in diag.cause


def test_nothing_to_say_about_a_clean_run(tmp_path):
    assert diagnose(_captured(tmp_path, "done: 5 steps\n"), 0) is None
    assert diagnose(tmp_path / "missing", None) is None
