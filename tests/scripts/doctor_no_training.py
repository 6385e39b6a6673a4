"""A script that runs a model forward only: no training step to observe."""

import torch

model = torch.nn.Linear(8, 1)
with torch.no_grad():
    for _ in range(5):
        model(torch.randn(4, 8))
print("inference done")
