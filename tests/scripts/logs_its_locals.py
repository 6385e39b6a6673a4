"""A script whose main() logs its own locals() as its hyper-parameters, with each checkpoint.

``hparams = locals()`` is taken first thing: the function's arguments. Any reader of the
frame's ``f_locals`` before Python 3.13 would add the loop's locals to that dict (the model,
the loss, the dict itself) and ``json.dumps`` would then fail on a circular reference.
"""

import json

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main(lr=1e-2, epochs=3, batch_size=16, save_every=4):
    hparams = locals()  # the run's hyper-parameters, logged with each checkpoint
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(256, 10), torch.randn(256, 1)), batch_size=batch_size)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    step = 0
    for _ in range(epochs):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % save_every == 0:
                print(f"step {step} hparams {json.dumps(hparams, sort_keys=True)}", flush=True)


if __name__ == "__main__":
    main()
