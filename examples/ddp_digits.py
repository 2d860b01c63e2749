"""Train a small CNN on handwritten digits with DistributedDataParallel, one process per device.

    torchrun --nproc-per-node 2 examples/ddp_digits.py --epochs 3
    torchrun --nproc-per-node 2 examples/ddp_digits.py --epochs 3 --fsdp   # sharded (FSDP2)

torchrun gives each process RANK, LOCAL_RANK, WORLD_SIZE and the rendezvous address; plain
`python` runs a group of one. NCCL and one GPU per process when CUDA is available, gloo on CPU
otherwise. Rank 0 writes TensorBoard events to SummaryWriter's default ./runs/<date>_<host>.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler
from torch.utils.tensorboard import SummaryWriter
from torchvision import datasets, transforms

# Beside this file, so the script finds the data from any working directory.
DIGITS = Path(__file__).resolve().parent.parent / "sample_data" / "digits"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32, help="per process")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--data", type=Path, default=DIGITS, help="ImageFolder root: train/, val/")
    p.add_argument("--fake-data", action="store_true", help="random images (FakeData), no files")
    p.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: no limit)")
    p.add_argument("--log-every", type=int, default=5, help="steps between loss logs")
    p.add_argument("--seed", type=int, default=0, help="the same on every rank: the same model")
    p.add_argument("--fsdp", action="store_true", help="shard with FSDP2's fully_shard, not DDP")
    args = p.parse_args()
    if not args.fake_data and not (args.data / "train").is_dir():
        p.error(f"--data {args.data} has no train/ folder: give an ImageFolder root with "
                "train/ and val/, or use --fake-data")
    return args


def load_data(args: argparse.Namespace) -> tuple[Dataset, Dataset, int]:
    """Train set, validation set, number of classes."""
    tf = transforms.Compose([transforms.Grayscale(), transforms.Resize((16, 16)),
                             transforms.ToTensor(), transforms.Normalize((0.5,), (0.5,))])
    if args.fake_data:
        return (datasets.FakeData(1024, (1, 8, 8), 10, transform=tf),
                datasets.FakeData(256, (1, 8, 8), 10, transform=tf, random_offset=1024), 10)
    train = datasets.ImageFolder(args.data / "train", tf)
    return train, datasets.ImageFolder(args.data / "val", tf), len(train.classes)


def small_cnn(num_classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 4 * 4, num_classes),  # 16x16 images, halved twice
    )


def sharded(model: nn.Module, device: torch.device) -> nn.Module:
    """FSDP2: each conv layer sharded over the ranks, then the root (the rest). Every rank keeps
    only its slice of each parameter, gathered for the layer's forward and backward, and each
    gradient is reduce-scattered to the rank that owns it."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for layer in model:  # a slice model[0:3] would be a new module: shard the layers themselves
        if isinstance(layer, nn.Conv2d):
            fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def global_mean(*sums: float, device: torch.device) -> list[float]:
    """Add each sum, and the count given last, over all ranks: means over the global batch."""
    t = torch.tensor(sums, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return [(t[i] / t[-1]).item() for i in range(len(sums) - 1)]


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, device: torch.device) -> list[float]:
    model.eval()
    loss = correct = count = 0.0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        out = model(x)
        loss += nn.functional.cross_entropy(out, y, reduction="sum").item()
        correct += (out.argmax(1) == y).sum().item()
        count += len(y)
    model.train()
    return global_mean(loss, correct, count, device=device)


@record  # an exception in any rank is written where torchrun reports it, traceback and all
def main() -> None:
    args = parse_args()
    alone = {} if "LOCAL_RANK" in os.environ else dict(store=dist.HashStore(), rank=0, world_size=1)
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)  # before init_process_group: NCCL binds this GPU
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, **alone)  # torchrun's rank and world, or plain python's one
    rank = dist.get_rank()

    train_set, val_set, num_classes = load_data(args)
    sampler = DistributedSampler(train_set, shuffle=True)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    val_sampler = DistributedSampler(val_set, shuffle=False)
    val_loader = DataLoader(val_set, batch_size=256, sampler=val_sampler)
    # the same seed on every rank: fully_shard keeps each rank's own slice of what it built (DDP
    # would broadcast rank 0's parameters, FSDP does not)
    torch.manual_seed(args.seed)
    net = small_cnn(num_classes).to(device)
    ids = [local_rank] if device.type == "cuda" else None
    model = sharded(net, device) if args.fsdp else DDP(net, device_ids=ids)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    criterion = nn.CrossEntropyLoss().to(device)
    writer = SummaryWriter() if rank == 0 else None  # only rank 0 logs
    if writer:
        print(f"{dist.get_world_size()} processes ({backend}); events in {writer.log_dir}",
              flush=True)

    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            out = model(x)
            loss = criterion(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % args.log_every == 0:
                n = len(y)
                right = (out.argmax(1) == y).sum().item()
                mean_loss, acc = global_mean(loss.item() * n, right, n, device=device)
                if writer:
                    writer.add_scalar("train/loss", mean_loss, step)
                    writer.add_scalar("train/acc", acc, step)
                    print(f"epoch {epoch} step {step} loss {mean_loss:.6f} acc {acc:.3f}",
                          flush=True)
            if step == args.max_steps:
                break
        val_loss, val_acc = evaluate(model, val_loader, device)
        if writer:
            writer.add_scalar("val/loss", val_loss, step)
            writer.add_scalar("val/acc", val_acc, step)
            print(f"epoch {epoch} val loss {val_loss:.4f} acc {val_acc:.3f}", flush=True)
        if step == args.max_steps:
            break

    if writer:
        writer.close()
    # gloo: without a barrier, a rank still in its last collective can abort at exit (torch 2.14)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
