"""A compiled model with two graph breaks in its forward (an .item() and a print)
(``breaks``), an input whose length changes every step (``shapes``: recompiles), both
(``both``), or, as a twin that is not compiling, an eager model that sleeps
for 6 s in its forward at step 5 (``sleep``).

    python compile_breaks.py breaks|shapes|both|sleep [STEPS]
"""

import sys
import time

import torch


class Net(torch.nn.Module):
    def __init__(self, breaks: bool) -> None:
        super().__init__()
        self.breaks = breaks
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 1)

    def forward(self, x):
        h = torch.relu(self.a(x))
        if self.breaks:
            if h.sum().item() > 1e9:  # graph break: a Python number from a tensor
                h = h * 2
            print("forward", tuple(h.shape))  # graph break: print
        if mode == "sleep" and step == 5:
            time.sleep(6)  # not compiling: a stall
        return self.b(h)


mode = sys.argv[1] if len(sys.argv) > 1 else "breaks"
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 12
torch.manual_seed(0)
net = Net(breaks=mode in ("breaks", "both"))
model = net if mode == "sleep" else torch.compile(net, dynamic=False)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(steps):
    rows = 4 + (step % 3 if mode in ("shapes", "both") else 0)  # 4, 5, 6, 4, ...: recompiles for 5 and 6
    x, y = torch.randn(rows, 8), torch.randn(rows, 1)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
