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


def test_validation_runs_at_the_micro_batch(tmp_path):
    """--accum-steps 4 of a batch of 64: validation's forwards see 16 images at most, as the
    training step's do (a run that needed accumulation to fit must fit in validation too)."""
    from training import data, models
    from training.cli import build_parser
    from training.distributed import Placement
    from training.loop import Loop
    from training.metrics import Recorder

    argv = ["--log-dir", str(tmp_path), "--batch-size", "64", "--accum-steps", "4"]
    args = build_parser().parse_args([*argv, "--max-steps", "1", "--checkpoint", "none"])
    p = Placement("single", "single", torch.device("cpu"), per_device_batch=64)
    rec = Recorder(tmp_path, True)
    model = models.build("tinycnn", 3, 10)
    seen: list[int] = []
    model.register_forward_pre_hook(lambda _m, inputs: seen.append(inputs[0].shape[0]))
    loop = Loop(args, p, data.synthetic(8), model, rec, None, lambda: False)
    try:
        loop.validate()
    finally:
        rec.close()
    assert seen and max(seen) == 16, seen
    assert sum(seen) == len(loop.data.val) and loop.last_val["acc"] is not None


CAPABILITY = {0: (8, 0), 1: (7, 0), 2: (7, 5)}  # FAKE: an A100 beside a V100 and a T4


@pytest.fixture
def fake_gpus(monkeypatch):
    """FAKE: CUDA's capability and name per index (no GPU here); is_bf16_supported must not be
    asked (it says yes on V100/T4 and probes the current device, cuda:0 before set_device)."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: CAPABILITY[i])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: f"fake{i}")

    def never(*_a, **_k):
        raise AssertionError("is_bf16_supported asked")

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", never)


@pytest.mark.parametrize(
    "device,ids,refused",
    [
        (0, [], None),  # rank 0 on the A100
        (1, [], "GPU 1 (fake1) has compute capability 7.0, below 8.0"),  # rank 1 on the V100
        (2, [], "GPU 2 (fake2) has compute capability 7.5"),
        (0, [0, 2], "GPU 2 (fake2)"),  # DP over the A100 and the T4
    ],
)
def test_bf16_is_judged_by_the_run_s_own_gpu_capability(fake_gpus, tmp_path, device, ids, refused):
    from training.cli import BadInput, build_parser
    from training.distributed import Placement

    args = build_parser().parse_args(["--log-dir", str(tmp_path), "--precision", "bf16"])
    mode = "dp" if ids else "single"
    p = Placement(mode, mode, torch.device("cuda", device), device_ids=ids, per_device_batch=32)
    if refused is None:
        knobs.check(args, p)
        return
    with pytest.raises(BadInput) as e:
        knobs.check(args, p)
    assert refused in str(e.value) and "use --precision fp16" in str(e.value)
    assert "\n" not in str(e.value)


def test_the_preflight_refuses_bf16_on_a_gpu_below_compute_capability_8(monkeypatch):
    """Fake NVML (no GPU here): GPU 1 is a V100 (7.0), where torch.cuda.is_bf16_supported() says
    yes and bf16 runs emulated; the lab refuses before anything starts, as the trainer would."""
    from lab.engine.devices import nvml as devices
    from lab.engine.preflight.checks import machine_facts, refusals
    from lab.engine.spec.run import RunConfig
    from tests.fake_nvml import FakeNvml, fake_gpus

    gpus = fake_gpus(2)
    gpus[1].compute_capability = (7, 0)
    monkeypatch.setattr(devices, "pynvml", FakeNvml(gpus))

    def refused(**kw):
        c = RunConfig(mode="ddp", **{"nproc": 2, **kw})
        return [e for e in refusals(c, machine_facts(c, gpus=())) if e.field == "precision"]

    (error,) = refused(gpus=(0, 1), precision="bf16")
    assert "GPU 1 is 7.0" in str(error) and "use precision fp16" in str(error)
    assert refused(gpus=(0, 1), precision="fp16") == []
    assert refused(gpus=(0,), nproc=1, precision="bf16") == []  # 9.0: bf16 of its own
