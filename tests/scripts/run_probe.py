"""Prints what `torchboost run` applied to it, as JSON, then exits with the code asked for."""

import json
import os
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
print(json.dumps({"pid": os.getpid(), "threads": torch.get_num_threads(), "workers": loader.num_workers,
                  "argv": sys.argv, "file": __file__}))
if sys.argv[1:] == ["crash"]:
    raise ValueError("the script's own error")
sys.exit(int(sys.argv[1]) if sys.argv[1:] else 0)
