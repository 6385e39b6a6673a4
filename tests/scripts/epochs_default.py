"""A pytorch/examples-shaped script: its run length is an argparse default the user does not type.

``python epochs_default.py [--epochs N]``: 3 epochs of 16 batches by default.
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def train(args: argparse.Namespace, model: nn.Module, loader: DataLoader, optimizer: torch.optim.Optimizer) -> None:
    for epoch in range(1, args.epochs + 1):
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(512, 32), torch.randn(512, 1))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    train(args, model, loader, torch.optim.SGD(model.parameters(), lr=0.01))


if __name__ == "__main__":
    main()
