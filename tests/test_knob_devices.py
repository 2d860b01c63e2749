"""The precision knobs where devices decide (issue 33), in-process: autocast entered per thread
under DataParallel, and bf16 judged by the run's own device.

PyTorch's autocast state, its dtype included, is per thread; DataParallel's replica threads
re-enter it with only ``enabled=`` (torch/nn/parallel/parallel_apply.py), i.e. the device's default
dtype. ``training.knobs.AutocastForward`` enters the asked dtype inside the module's forward, in
whatever thread runs it. Tested here on the CPU with plain threads, which start with autocast off.
"""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from training import distributed, knobs


def _in_thread(fn):
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(timeout=60)
    assert out, "the thread did not finish"
    return out[0]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_forward_in_a_new_thread_runs_in_the_asked_dtype(dtype):
    torch.manual_seed(0)
    net = knobs.AutocastForward(nn.Linear(8, 4), "cpu", dtype)
    x = torch.randn(2, 8)
    with torch.autocast("cpu", dtype=dtype):  # the caller's own autocast does not reach a thread
        assert _in_thread(lambda: nn.Linear(8, 4)(x).dtype) == torch.float32
        assert _in_thread(lambda: net(x).dtype) == dtype

    def like_parallel_apply():
        # what DP's replica thread does: autocast with only enabled=, the device's default dtype
        with torch.autocast("cpu", enabled=True):
            return net(x).dtype

    assert _in_thread(like_parallel_apply) == dtype


def test_dp_replicates_the_autocast_wrapper_not_the_bare_model():
    p = distributed.Placement("dp", "dp", torch.device("cpu"), device_ids=[], per_device_batch=8)
    model = nn.Linear(8, 4)
    wrapped = distributed.wrap(model, p, None, torch.bfloat16)
    assert isinstance(wrapped, nn.DataParallel)
    assert isinstance(wrapped.module, knobs.AutocastForward)
    assert wrapped.module.module is model and wrapped.module.dtype == torch.bfloat16
    assert wrapped(torch.randn(2, 8)).dtype == torch.bfloat16
    # fp32: DP wraps the model itself
    assert distributed.wrap(nn.Linear(8, 4), p).module.__class__ is nn.Linear
