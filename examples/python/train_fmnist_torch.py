#!/usr/bin/env python3
"""train_fmnist_torch.py - a PyTorch model on Fashion-MNIST fed by
examples/fashion_mnist.lua through the sluice Python binding: the Python
twin of the C trainer (examples/trainer/trainer.c, `make demo`).

    python examples/python/train_fmnist_torch.py [--epochs 3] [--data DIR]
        [--model mlp|softmax] [--batch 128] [--seed 42] [--lr X]

Each epoch is one pass of the training pipeline (a `for` over the
DataLoader, i.e. one pass of the sluice pipeline) and one pass of the test
pipeline, and prints the C trainer's line:

    epoch=N loss=L test_acc=A wait=W

L is the mean training cross-entropy of the epoch, A the accuracy on the
10 000 t10k images, W the share of the epoch's wall time spent waiting for
the next batch (inside the iterator's next).

DATA holds train.slr and t10k.slr; when they are missing they are packed
from the dataset-fashion-mnist files with the `sluice` command (--sluice,
default build/tools/sluice), as `make demo` does.  Needs torch and the
binding (`pip install ./bindings/python`, or PYTHONPATH=build/bindings/python
with LUA_PATH set as `make demo` sets it; docs/PYTHON.md).
"""
import argparse
import os
import subprocess
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader

from sluice.torch import IterableDataset

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "examples", "fashion_mnist.lua")
FMNIST = "/usr/share/datasets/fashion-mnist"


def ensure_data(data, cli):
    os.makedirs(data, exist_ok=True)
    for split in ("train", "t10k"):
        out = os.path.join(data, split + ".slr")
        if os.path.exists(out) and os.path.getsize(out) > 0:
            continue
        print("train_fmnist_torch: packing %s into %s" % (split, out),
              file=sys.stderr)
        subprocess.run([cli, "pack", "idx", "-q",
                        os.path.join(FMNIST, split + "-images-idx3-ubyte.gz"),
                        os.path.join(FMNIST, split + "-labels-idx1-ubyte.gz"),
                        "-o", out], check=True)


def make_model(kind):
    if kind == "softmax":
        return nn.Linear(784, 10)
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


class Timed:
    """Iterates `it`, adding the time spent inside its next to .wait_s."""

    def __init__(self, it):
        self.it = iter(it)
        self.wait_s = 0.0

    def __iter__(self):
        return self

    def __next__(self):
        t = time.perf_counter()
        try:
            return next(self.it)
        finally:
            self.wait_s += time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--data", default=os.path.join(ROOT, "build", "data"))
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build", "tools",
                                                     "sluice"))
    ap.add_argument("--model", choices=("mlp", "softmax"), default="mlp")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch intra-op threads (0: torch's default)")
    a = ap.parse_args()

    ensure_data(a.data, a.sluice)
    torch.manual_seed(a.seed)
    if a.threads:
        torch.set_num_threads(a.threads)

    train = IterableDataset(SCRIPT, "train", a.data, a.batch, a.seed)
    test = IterableDataset(SCRIPT, "test", a.data)
    train_loader = DataLoader(train, batch_size=None, num_workers=0)
    test_loader = DataLoader(test, batch_size=None, num_workers=0)

    model = make_model(a.model)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    loss_fn = nn.CrossEntropyLoss()
    acc = 0.0
    for epoch in range(1, a.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        loss_sum, seen = 0.0, 0
        it = Timed(train_loader)
        for batch in it:
            x, y = batch["image"], batch["label"]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            loss_sum += loss.item() * y.shape[0]
            seen += y.shape[0]
        model.eval()
        correct, total = 0, 0
        tit = Timed(test_loader)
        with torch.no_grad():
            for batch in tit:
                pred = model(batch["image"]).argmax(1)
                correct += (pred == batch["label"]).sum().item()
                total += batch["label"].shape[0]
        wall = time.perf_counter() - t0
        acc = correct / total
        print("epoch=%d loss=%.4f test_acc=%.4f wait=%.3f" % (
            epoch, loss_sum / seen, acc, (it.wait_s + tit.wait_s) / wall),
            flush=True)
    train.close()
    test.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
