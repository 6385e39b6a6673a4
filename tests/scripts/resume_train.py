"""A training script that checkpoints at every window end and can kill itself, for test_resume.

    python resume_train.py --ckpt C --log L [--kill-after-step S] [--resume]

Trains a small MLP with dropout (so the global RNG matters) on a shuffled loader for two
epochs with accumulation.steps = 2, logging every micro-step's loss as a float hex. With
``--kill-after-step S`` it SIGKILLs itself right after the checkpoint of real step S;
``--resume`` loads the checkpoint and continues.
"""

from __future__ import annotations

import argparse
import os
import signal

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import torchboost
from torchboost import BoostConfig

EPOCHS = 2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--kill-after-step", type=int, default=None)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(44, 8, generator=g), torch.randint(0, 3, (44,), generator=g))
    loader = DataLoader(data, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(2))
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.8)

    booster = torchboost.Booster(BoostConfig.off().replace(accumulation={"steps": 2}), device="cpu", verbose=False)
    model, optimizer, loader, scheduler = booster.prepare(model, optimizer, loader, scheduler)
    if args.resume:
        booster.load(args.ckpt, model=model, optimizer=optimizer, scheduler=scheduler)

    loss_fn = nn.CrossEntropyLoss()
    with open(args.log, "a", encoding="utf-8") as log:
        for epoch in range(loader.epoch, EPOCHS):
            for x, y in loader:
                with booster.accumulate(model):
                    loss = loss_fn(model(x), y)
                    booster.backward(loss)
                    optimizer.step()
                    optimizer.zero_grad()
                    scheduler.step()
                log.write(f"{epoch} {loss.item().hex()}\n")
                log.flush()
                if booster.at_window_boundary:
                    booster.save(args.ckpt, model=model, optimizer=optimizer, scheduler=scheduler)
                    if optimizer.real_steps == args.kill_after_step:
                        os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
