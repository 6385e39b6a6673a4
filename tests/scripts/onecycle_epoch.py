"""One epoch of 16 batches under OneCycleLR sized to it: a loop that turns once more raises.

``OneCycleLR(..., epochs=1, steps_per_epoch=len(loader))`` allows exactly 16 scheduler
steps; its 17th raises "Tried to step 17 times". The tiny model waits on its loader a good
share of each step, as the data-bound scripts the replay probe is for.
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

epochs = 1
torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(256, 10), torch.randn(256, 1)), batch_size=16, shuffle=True)
model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, epochs=epochs, steps_per_epoch=len(loader))
turns = 0
for epoch in range(epochs):
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        turns += 1
print(f"turns {turns}")
