"""A GAN-like loop: two Adams, the generator's stepping every step, the critic's every 5th."""

import torch
from torch import nn

torch.manual_seed(0)
generator, critic = nn.Linear(8, 8), nn.Linear(8, 1)
g_opt = torch.optim.Adam(generator.parameters(), lr=1e-3)
c_opt = torch.optim.Adam(critic.parameters(), lr=1e-2)
for step in range(60):
    fake = generator(torch.randn(16, 8))
    g_loss = -critic(fake).mean()
    g_opt.zero_grad()
    g_loss.backward()
    g_opt.step()
    if step % 5 == 0:
        c_loss = critic(fake.detach()).mean() - critic(torch.randn(16, 8)).mean()
        c_opt.zero_grad()
        c_loss.backward()
        c_opt.step()
