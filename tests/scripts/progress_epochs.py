"""Three epochs of a DataLoader wrapped in a progress bar, the epochs a literal in the loop:
``for epoch in range(3): for x, y in tqdm(loader)``; 16 batches an epoch, 48 steps in all."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(512, 32), torch.randn(512, 1)), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(3):
    for x, y in tqdm(loader, desc=f"epoch {epoch}"):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
