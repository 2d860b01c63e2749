"""--sync-bn (issue 33): declared like the other DDP knobs, refused outside ddp and without GPUs in
one line, and in the trainer BatchNorm layers become nn.SyncBatchNorm before DDP's wrap, keeping
their parameters (the optimizer's stay valid)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from lab.engine.launch import form, knobs
from lab.engine.spec.run import RunConfig
from training import knobs as tknobs
from training.cli import BadInput, parse_args


def test_the_lab_declares_and_checks_sync_bn():
    assert "sync_bn" in {f.name for f in form.FIELDS}
    field = next(f for f in knobs.FIELDS if f.name == "sync_bn")
    assert field.trainer_flag == "--sync-bn"
    probs = dict(knobs.knob_problems(RunConfig(mode="single", sync_bn=True)))
    assert "mode ddp" in probs["sync_bn"]
    probs = dict(knobs.knob_problems(RunConfig(mode="ddp", sync_bn=True)))
    assert probs["sync_bn"] == knobs.SYNC_BN_CPU


def test_the_trainer_refuses_it_outside_ddp_and_on_the_cpu(tmp_path):
    with pytest.raises(BadInput, match="--sync-bn is an option of DistributedDataParallel"):
        parse_args(["--mode", "single", "--sync-bn", "--log-dir", str(tmp_path)])
    ns = SimpleNamespace(sync_bn=True, precision="fp32", amp=False, accum_steps=1, batch_size=8)
    cpu = SimpleNamespace(device=torch.device("cpu"), device_ids=[], world_size=2)
    with pytest.raises(BadInput, match="--sync-bn runs on GPUs only"):
        tknobs.check(ns, cpu)
    assert form.trainer_flags(RunConfig(mode="ddp", sync_bn=True)) == ["--sync-bn"]


def test_batchnorm_layers_become_syncbatchnorm_with_the_same_parameters():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    params = list(model.parameters())
    assert tknobs.has_batchnorm(model)
    same = tknobs.sync_bn(model, SimpleNamespace(sync_bn=True), "single")
    assert not any(isinstance(m, nn.SyncBatchNorm) for m in same.modules())
    conv = tknobs.sync_bn(model, SimpleNamespace(sync_bn=True), "ddp")
    assert isinstance(conv[1], nn.SyncBatchNorm)
    assert [id(p) for p in conv.parameters()] == [id(p) for p in params]
    assert not tknobs.has_batchnorm(nn.Sequential(nn.Linear(2, 2)))
