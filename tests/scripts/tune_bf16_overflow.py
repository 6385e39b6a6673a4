"""A script that trains fine in fp32 and whose loss overflows under bf16 autocast.

The model's forward ends in log(1 - sigmoid(z)) with z near 10: in fp32 sigmoid(10)
is 0.99995, in bf16 it rounds to exactly 1.0 and the log gives -inf.
"""

import torch
from torch import nn


class Overflowing(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 1)
        nn.init.zeros_(self.fc.weight)
        nn.init.constant_(self.fc.bias, 10.0)

    def forward(self, x):
        return torch.log1p(-torch.sigmoid(self.fc(x)))


torch.manual_seed(0)
model = Overflowing()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(64, 16) * 0.01
for step in range(1000):
    loss = -model(x).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
