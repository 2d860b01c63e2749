"""Train a small CNN on handwritten digits in one process, nn.DataParallel over every visible GPU.

    python examples/dp_digits.py --epochs 3
    CUDA_VISIBLE_DEVICES=0,1 python examples/dp_digits.py --batch-size 128

DataParallel splits each batch across the GPUs and gathers the outputs on
the first one. With one GPU, or none, the model runs as it is. TensorBoard
events go to SummaryWriter's default folder, ./runs/<date>_<host>, below the
working directory.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset
from torch.utils.tensorboard import SummaryWriter
from torchvision import datasets, transforms

# Beside this file, so the script finds the data from any working directory.
DIGITS = Path(__file__).resolve().parent.parent / "sample_data" / "digits"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64, help="the whole batch, split over GPUs")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--data", type=Path, default=DIGITS, help="ImageFolder root: train/, val/")
    p.add_argument("--fake-data", action="store_true", help="random images (FakeData), no files")
    p.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: no limit)")
    p.add_argument("--log-every", type=int, default=5, help="steps between loss logs")
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


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, device: torch.device) -> tuple[float, float]:
    model.eval()
    loss = correct = count = 0.0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        out = model(x)
        loss += nn.functional.cross_entropy(out, y, reduction="sum").item()
        correct += (out.argmax(1) == y).sum().item()
        count += len(y)
    model.train()
    return loss / count, correct / count


def main() -> None:
    args = parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_set, val_set, num_classes = load_data(args)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=256)

    # on the first GPU before wrapping: DataParallel replicates from there
    model = small_cnn(num_classes).to(device)
    gpus = torch.cuda.device_count()
    if gpus > 1:
        model = nn.DataParallel(model)
        each = args.batch_size // gpus
        print(f"DataParallel over {gpus} GPUs, {each} samples each per step", flush=True)
    else:
        print(f"one device ({device}): DataParallel needs at least two GPUs, so the model runs "
              "unwrapped", flush=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)  # after the wrap
    criterion = nn.CrossEntropyLoss().to(device)
    writer = SummaryWriter()
    print(f"events in {writer.log_dir}", flush=True)

    step = 0
    for epoch in range(args.epochs):
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            out = model(x)
            loss = criterion(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % args.log_every == 0:
                acc = (out.argmax(1) == y).float().mean().item()
                writer.add_scalar("train/loss", loss.item(), step)
                writer.add_scalar("train/acc", acc, step)
                print(f"epoch {epoch} step {step} loss {loss.item():.6f} acc {acc:.3f}", flush=True)
            if step == args.max_steps:
                break
        val_loss, val_acc = evaluate(model, val_loader, device)
        writer.add_scalar("val/loss", val_loss, step)
        writer.add_scalar("val/acc", val_acc, step)
        print(f"epoch {epoch} val loss {val_loss:.4f} acc {val_acc:.3f}", flush=True)
        if step == args.max_steps:
            break
    writer.close()


if __name__ == "__main__":
    main()
