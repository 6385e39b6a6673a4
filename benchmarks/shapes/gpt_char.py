"""nanoGPT's shakespeare_char configuration, scaled to run in seconds on 2 cores.

nanoGPT's config/train_shakespeare_char.py: 6 layers x 384, 6 heads, 256 tokens, batch 64,
dropout 0.2, AdamW, vocabulary 65. Here: 4 layers x 128, 4 heads, 64 tokens, batch 8, the
same dropout, vocabulary and optimizer, on random characters. ``python gpt_char.py --steps N``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).parent))
from _common import train  # noqa: E402

VOCAB, LAYERS, WIDTH, HEADS, TOKENS, BATCH, DROPOUT = 65, 4, 128, 4, 64, 8, 0.2


class Block(nn.Module):
    """A pre-norm transformer block, causal attention through SDPA, as nanoGPT's."""

    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH),
                                 nn.Dropout(DROPOUT))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in self.qkv(self.ln1(x)).split(c, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=DROPOUT if self.training else 0.0)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


def build() -> tuple[nn.Module, torch.optim.Optimizer, list[tuple[torch.Tensor, torch.Tensor]]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(VOCAB, WIDTH), nn.Dropout(DROPOUT), *(Block() for _ in range(LAYERS)),
                          nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99))
    data = torch.randint(0, VOCAB, (4, BATCH, TOKENS + 1))
    return model, optimizer, [(d[:, :-1], d[:, 1:]) for d in data]


def loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten())


if __name__ == "__main__":
    train(build, loss)
