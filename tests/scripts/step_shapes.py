"""Training loops of the shapes people write, on a tiny model, seeded.

``--eval-every N``: every N steps an evaluation pass over 30 batches of a second loader,
``model.eval()`` under ``torch.no_grad()`` (``--eval-grad``: the same pass with gradients
on; with ``--train-mode`` too, no ``model.eval()`` either, which no observer can tell from
training). ``--accum K``: backward on every batch,
``optimizer.step()`` on every K-th. The training loader has 512 batches: one epoch.
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--eval-every", type=int, default=0)
parser.add_argument("--eval-grad", action="store_true")
parser.add_argument("--train-mode", action="store_true")
parser.add_argument("--accum", type=int, default=1)
parser.add_argument("--batches", type=int, default=512)
args = parser.parse_args()

torch.manual_seed(0)
train = DataLoader(TensorDataset(torch.randn(4 * args.batches, 8), torch.randn(4 * args.batches, 1)), batch_size=4)
held_out = DataLoader(TensorDataset(torch.randn(120, 8), torch.randn(120, 1)), batch_size=4)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)


def evaluate() -> float:
    model.train(args.train_mode)
    total = 0.0
    with torch.set_grad_enabled(args.eval_grad):
        for x, y in held_out:
            total += nn.functional.mse_loss(model(x), y).item()
    model.train()
    return total / len(held_out)


for i, (x, y) in enumerate(train):
    loss = nn.functional.mse_loss(model(x), y) / args.accum
    loss.backward()
    if (i + 1) % args.accum:
        continue
    optimizer.step()
    optimizer.zero_grad()
    step = (i + 1) // args.accum
    if args.eval_every and step % args.eval_every == 0:
        evaluate()
