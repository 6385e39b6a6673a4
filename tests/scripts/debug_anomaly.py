"""A plain MLP that still has anomaly detection on from a debugging session, at its top.

``python debug_anomaly.py [--steps N]``: prints whether anomaly detection is on at its 3rd
step (step 3, counted from 1), as ``anomaly detection at step 3: True``.
"""

import argparse

import torch
from torch import nn

torch.autograd.set_detect_anomaly(True)

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=400)
args = parser.parse_args()

torch.manual_seed(0)
# One thread and a plain SGD: on a machine shared with other processes the doctor's ranking
# then rests on this script's leftover alone, not on the cores the others leave it.
torch.set_num_threads(1)
layers = [nn.Linear(64, 256), nn.ReLU()]
for _ in range(7):
    layers += [nn.Linear(256, 256), nn.ReLU()]
model = nn.Sequential(*layers, nn.Linear(256, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(128, 64), torch.randint(0, 10, (128,))
for step in range(1, args.steps + 1):
    if step == 3:
        print(f"anomaly detection at step 3: {torch.is_anomaly_enabled()}", flush=True)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
