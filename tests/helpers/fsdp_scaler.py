"""Run under torchrun with 2 gloo ranks by tests/test_train_fsdp.py: the trainer's fp16 under fsdp
(FSDP2's fp16 MixedPrecisionPolicy, torch.amp.GradScaler on its DTensor gradients) on the CPU, a
stand-in for CUDA where the scaler's logic is the same. At step 1 rank 1 alone puts an inf into
its shard of the first gradient; each rank writes to ``rank<i>.txt`` in the current folder, per
step, whether its parameters changed and the scale after the update."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    policy = MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=torch.float32)
    for unit in (model[0], model[2], model):  # as training.sharding: the blocks, then the root
        fully_shard(unit, mesh=mesh, mp_policy=policy)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    x, y, seen = torch.randn(4, 8), torch.randint(0, 4, (4,)), []
    for step in range(3):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x).float(), y)
        scaler.scale(loss).backward()
        if step == 1 and rank == 1:  # an overflow in one rank's shard only
            next(model.parameters()).grad.to_local().view(-1)[0] = float("inf")
        before = [p.detach().full_tensor().clone() for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        after = [p.detach().full_tensor() for p in model.parameters()]
        stepped = any(not torch.equal(a, b) for a, b in zip(before, after))
        seen.append(f"rank {rank} step {step} stepped {stepped} scale {scaler.get_scale()}")
    Path(f"rank{rank}.txt").write_text("\n".join(seen))  # torchrun interleaves the ranks' stdout
    dist.barrier()  # before destroy: avoids gloo's abort at exit (torch 2.14)
    dist.destroy_process_group()
    # and then no interpreter teardown, as the trainer's ranks leave (training.distributed's
    # exit_process): its C++ teardown still aborted a rank here ("terminate called without an
    # active exception", SIGABRT) in 1 of 12 runs, and torchrun failed the job for it
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
