"""lab/engine/preflight/estimate.py: the memory a run needs, against real measurements on the CPU.

REAL: the estimate's forward runs on PyTorch's meta device; it is checked
against (1) the same count on the CPU, with real tensors, and (2) the peak of
memory a real training step allocates on the CPU (two SGD-with-momentum steps
of the trainer's models, measured with torch.profiler's memory events), for
tinycnn and resnet18. The factor allowed, 0.85 to 1.5 of the estimate, is
what the estimate leaves out, both ways: it counts the gradients and all the
activations as held at once, while a real backward frees activations as the
gradients appear (the measured peak of resnet18 is a few percent lower); and
it leaves out the short-lived buffers a step allocates (the loss's
gradient, a convolution's workspace), which weigh most where activations
dominate (tinycnn measures about a third more).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from lab.engine.preflight import estimate
from lab.engine.spec.run import RunConfig
from lab.runfolder import REPO_ROOT
from training import models


def _saved_on_cpu_mib(model: str, batch: int, size: int) -> float:
    """What estimate measures on the meta device, measured with real tensors on the CPU instead."""
    torch.manual_seed(0)
    net = models.build(model, estimate.CHANNELS, estimate.CLASSES)
    own = {p.untyped_storage().data_ptr() for p in net.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in own:
            saved[s.data_ptr()] = s.nbytes()
        return t

    x, y = torch.randn(batch, 3, size, size), torch.randint(0, 10, (batch,))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = nn.functional.cross_entropy(net(x), y)
    del loss
    return sum(saved.values()) / 2**20


@pytest.mark.parametrize("model,batch,size", [("tinycnn", 64, 32), ("resnet18", 16, 64)])
def test_meta_device_counts_what_the_cpu_saves(model, batch, size):
    e = estimate.estimate(model, batch, size)
    assert e.activations_mib == pytest.approx(_saved_on_cpu_mib(model, batch, size), rel=1e-6)
    params = sum(p.numel() for p in models.build(model, 3, 10).parameters()) * 4 / 2**20
    assert e.params_mib == e.grads_mib == e.optimizer_mib == pytest.approx(params)


PEAK = """
import sys, torch
from torch import nn
from torch.profiler import ProfilerActivity, profile
from training import models
torch.set_num_threads(1)
name, batch, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
x, y = torch.randn(batch, 3, size, size), torch.randint(0, 10, (batch,))
with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
    net = models.build(name, 3, 10)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    for _ in range(2):  # the second step runs with the momentum buffers the first one made
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
live = peak = 0
memory = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
for e in sorted(memory, key=lambda e: e.start_ns()):
    live += e.nbytes()
    peak = max(peak, live)
print(peak / 2**20)
"""


@pytest.mark.proc
@pytest.mark.parametrize("model,batch,size", [("tinycnn", 64, 32), ("resnet18", 32, 64)])
def test_estimate_against_a_real_training_step_on_the_cpu(model, batch, size):
    r = subprocess.run(
        [sys.executable, "-c", PEAK, model, str(batch), str(size)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT), CUDA_VISIBLE_DEVICES=""),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    measured = float(r.stdout.strip().splitlines()[-1])
    e = estimate.estimate(model, batch, size)
    assert 0.85 <= measured / e.total_mib <= 1.5, (measured, e)


def test_amp_halves_the_activations_and_adds_the_weight_copies():
    full, half = (
        estimate.estimate("resnet18", 32, 64),
        estimate.estimate("resnet18", 32, 64, amp=True),
    )
    assert half.params_mib == full.params_mib  # float32 master weights either way
    assert (
        0.45 * full.activations_mib
        < half.activations_mib - full.params_mib / 2
        < 0.6 * full.activations_mib
    )


def test_the_estimate_grows_with_the_batch_and_the_image():
    small, big = estimate.estimate("tinycnn", 32, 32), estimate.estimate("tinycnn", 64, 32)
    assert big.activations_mib == pytest.approx(2 * small.activations_mib, rel=0.01)
    assert estimate.estimate("tinycnn", 32, 64).activations_mib == pytest.approx(
        4 * small.activations_mib, rel=0.05
    )
    # a real ImageNet batch: several GiB
    assert estimate.estimate("resnet18", 256, 224).total_mib > 5 * 1024


def test_per_gpu_follows_each_mode():
    assert estimate.per_gpu(RunConfig()) == {}  # the CPU: nothing to estimate
    single = estimate.per_gpu(RunConfig(gpus=(3,), batch_size=64))
    assert list(single) == [3] and single[3].batch == 64
    dp = estimate.per_gpu(RunConfig(mode="dp", gpus=(0, 1), batch_size=64, model="resnet18"))
    assert dp[0].batch == dp[1].batch == 32 and dp[1].optimizer_mib == 0 < dp[0].optimizer_mib
    assert dp[0].total_mib > dp[1].total_mib  # the first GPU holds more, as the seeds warn
    ddp = estimate.per_gpu(
        RunConfig(mode="ddp", gpus=(0, 1), nproc=2, batch_size=64, model="resnet18")
    )
    assert ddp[0] == ddp[1] and ddp[0].batch == 32 and ddp[0].buckets_mib == ddp[0].grads_mib
    assert "activations of 32 images" in ddp[0].describe() and "DDP buckets" in ddp[0].describe()


@pytest.mark.proc
def test_importing_the_lab_engine_does_not_import_torch():
    code = (
        "import sys, lab.engine.launch.launcher, lab.engine.preflight.checks, "
        "lab.engine.preflight.estimate, lab.engine.supervise.supervisor, lab.cli;"
        "print('torch' in sys.modules)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr


def test_torch_cuda_version_reads_the_build():
    v = estimate.torch_cuda_version()
    assert (
        v is None
        if torch.version.cuda is None
        else v == tuple(int(p) for p in torch.version.cuda.split(".")[:2])
    )
