"""3 x Linear(1024, 1024) at batch 256 in fp32: 4.29e9 FLOPs per step, forward and backward.

One matmul of 256 x 1024 by 1024 x 1024 is 2 x 256 x 1024 x 1024 = 0.537e9 FLOPs. Forward:
3 of them (1.61e9); backward: 3 weight gradients and 2 input gradients (the first layer's
input needs none), 5 more (2.68e9); 8 in all: 4294967296 FLOPs, as FlopCounterMode counts.
"""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(*(torch.nn.Linear(1024, 1024) for _ in range(3)))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(256, 1024)
y = torch.randn(256, 1024)
for step in range(60):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
