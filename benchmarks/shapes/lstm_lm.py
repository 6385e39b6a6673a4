"""An LSTM language model as pytorch/examples' word_language_model trains it, scaled down.

2 layers x 200 units, embedding 200 (its defaults), 35 tokens (its bptt), batch 10 (its default is 20), a
5,000-word vocabulary, dropout 0.2, on random words; Adam instead of its hand-written SGD
so that the optimizer has a fused kernel to offer. ``python lstm_lm.py --steps N``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).parent))
from _common import train  # noqa: E402

VOCAB, WIDTH, LAYERS, TOKENS, BATCH = 5_000, 200, 2, 35, 10


class LSTMModel(nn.Module):
    """Embedding, LSTM, dropout, a linear decoder over the vocabulary."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.drop = nn.Embedding(VOCAB, WIDTH), nn.Dropout(0.2)
        self.lstm = nn.LSTM(WIDTH, WIDTH, LAYERS, dropout=0.2, batch_first=True)
        self.decoder = nn.Linear(WIDTH, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.drop(self.embed(x)))
        return self.decoder(self.drop(out))


def build() -> tuple[nn.Module, torch.optim.Optimizer, list[tuple[torch.Tensor, torch.Tensor]]]:
    torch.manual_seed(0)
    model = LSTMModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = torch.randint(0, VOCAB, (4, BATCH, TOKENS + 1))
    return model, optimizer, [(d[:, :-1], d[:, 1:]) for d in data]


def loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten())


if __name__ == "__main__":
    train(build, loss)
