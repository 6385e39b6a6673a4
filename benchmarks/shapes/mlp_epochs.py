"""An MLP trained for 3 epochs over a DataLoader, as a first script is written: AdamW, seeded.

4096 random samples of 256 features, batch 64 (64 batches an epoch), 256-1024-1024-10.
``python mlp_epochs.py``; with a ``torchboost.toml`` beside it, the user's own settings.
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(4096, 256)
Y = torch.randint(0, 10, (4096,))
loader = DataLoader(TensorDataset(X, Y), batch_size=64, shuffle=True)
model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
opt = torch.optim.AdamW(model.parameters(), 1e-3)
for epoch in range(3):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("epoch", epoch, loss.item())
