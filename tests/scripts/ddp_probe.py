"""A small DDP job for torchrun: each rank trains a few steps and writes what it ran with.

    torchrun --standalone --nproc-per-node 2 ddp_probe.py OUT_DIR [STEPS] [--plain-end]

With --plain-end the script ends as many do, by leaving its loop (no barrier, no
destroy_process_group), and says at exit whether its process group is still up.

Writes OUT_DIR/rankR.json: the rank, torch's thread count and the DataLoader's settings
as the script's own objects report them (so settings applied from outside show here).
"""

import atexit
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

out, steps = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 40
plain_end = "--plain-end" in sys.argv
dist.init_process_group("gloo")
atexit.register(lambda: print(f"process group up at exit: {dist.is_initialized()}", file=sys.stderr, flush=True))
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 4)))
data = TensorDataset(torch.randn(4096, 32), torch.randint(0, 4, (4096,)))
loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
out.mkdir(parents=True, exist_ok=True)
(out / f"rank{rank}.json").write_text(json.dumps({
    "rank": rank, "world_size": dist.get_world_size(), "threads": torch.get_num_threads(),
    "num_workers": loader.num_workers, "pid": os.getpid()}))
done = 0
while done < steps:
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        done += 1
        if done == steps:
            break
if plain_end:
    sys.exit(0)
# gloo can abort a process at exit ("terminate called without an active exception") when
# one rank tears down while the other still talks, with or without torchboost: meet, then
# leave without running the process group's destructors.
dist.barrier()
sys.stdout.flush()
os._exit(0)
