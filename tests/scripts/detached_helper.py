"""Starts a helper (a sleeping process), detached with setsid when told, writes its pid, then trains slowly.

    python detached_helper.py PIDFILE detached|attached
"""

import subprocess
import sys
import time

import torch

pid_file, how = sys.argv[1], sys.argv[2]
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                          start_new_session=how == "detached")
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(10_000):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if step == 3:
        with open(pid_file, "w") as fh:
            fh.write(str(helper.pid))
    time.sleep(0.05)
