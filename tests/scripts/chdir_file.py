"""Reports how it was started, changes directory (as Hydra does), reads a file beside itself,
then trains a few steps. Prints one JSON line."""

import json
import os
import sys
from pathlib import Path

start = {"file": __file__, "argv0": sys.argv[0], "path0": sys.path[0]}
os.chdir(os.path.expanduser("~") if len(sys.argv) < 2 else sys.argv[1])
beside = (Path(__file__).parent / "chdir_file.py").is_file()
print(json.dumps({**start, "found_beside": beside}), flush=True)

import torch  # noqa: E402

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(12):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
