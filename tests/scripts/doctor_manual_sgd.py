"""A loop that updates weights by hand: no optimizer object."""

import torch

torch.manual_seed(0)
w = torch.randn(16, 1, requires_grad=True)
model = torch.nn.Linear(16, 16)
x, y = torch.randn(64, 16), torch.randn(64, 1)
for step in range(60):
    loss = ((model(x) @ w - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        for p in [w, *model.parameters()]:
            p -= 0.01 * p.grad
            p.grad = None
