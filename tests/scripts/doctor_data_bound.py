"""A data-bound training loop: each sample costs ~2 ms of numpy work, read by one process."""

import argparse

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    """Map-style dataset whose samples take real CPU work to produce."""

    def __init__(self, n: int = 512, dim: int = 32) -> None:
        self.n, self.dim = n, dim

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        rng = np.random.default_rng(i)
        work = rng.standard_normal(20000)
        for _ in range(4):  # ~2 ms of single-threaded CPU per sample: a decode/augment stand-in
            work = np.tanh(np.sin(work) * 1.1)
        x = torch.from_numpy(work[: self.dim].astype(np.float32))
        return x, torch.tensor(i % 4)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(0)
    # One intra-op thread: a tiny model gains nothing from more, and on a busy shared
    # machine a descheduled pool thread would stall its ops for tens of milliseconds.
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(SlowDataset(), batch_size=8, shuffle=True, num_workers=0)
    criterion = nn.CrossEntropyLoss()
    for _ in range(args.epochs):
        for x, y in loader:
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
