"""Trains, then stops making progress at step 12: a sleep, or a loader worker that hangs.

    python hang.py sleep|worker
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Hangs(Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        if mode == "worker" and i >= 12 * 8:
            time.sleep(3600)  # a worker that never answers, as a deadlocked one
        return torch.randn(4), torch.randn(1)


mode = sys.argv[1] if len(sys.argv) > 1 else "sleep"
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Hangs(), batch_size=8, num_workers=1 if mode == "worker" else 0)
for step, (x, y) in enumerate(loader):
    if mode == "sleep" and step == 12:
        time.sleep(3600)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
