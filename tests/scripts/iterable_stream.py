"""An IterableDataset that does not shard by worker, read through a DataLoader.

    python iterable_stream.py [booster]

Prints one JSON line: the samples seen (each once, or each twice when two workers replay
the stream), and the loader's worker count.
"""

import json
import sys

import torch
from torch.utils.data import DataLoader, IterableDataset


class Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.arange(32.0).reshape(32, 1))


loader = DataLoader(Stream(), batch_size=4)
model = torch.nn.Linear(1, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
if sys.argv[1:] == ["booster"]:
    import torchboost

    model, optimizer, loader = torchboost.Booster(device="cpu", verbose=False).prepare(model, optimizer, loader)
seen = []
for x in loader:
    seen += x.flatten().tolist()
    model(x).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
print(json.dumps({"samples": len(seen), "distinct": len(set(seen)), "workers": loader.num_workers}))
