"""Trains until stopped over a DataLoader, leaving marks in the folder it is given: one file
per loader worker (named by its pid), "stepping" on stdout once it steps, and "finally"
when its ``finally`` block runs. Its loader has no workers of its own: ``torchboost run``
gives it its configuration's."""

import os
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

marks = Path(sys.argv[1])


class Numbers(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        (marks / f"worker-{os.getpid()}").touch()
        return torch.full((2,), float(i))


loader = DataLoader(Numbers(), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
try:
    while True:
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            print("stepping", flush=True)
            time.sleep(0.01)
finally:
    (marks / "finally").write_text("ran")
