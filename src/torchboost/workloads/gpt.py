"""A small decoder-only transformer on a byte stream: the compute-bound workload.

Run: ``python -m torchboost.workloads.gpt [--steps N] [--size tiny|small|gpt2] [--booster]``.
The text is the documentation that ships with Python itself (docstrings of a fixed
list of standard-library modules and their public members), read as bytes: real
language with structure, so next-byte loss falls from ln(256) = 5.5 quickly, and
nothing is downloaded.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import math
import sys
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from torchboost.workloads._loop import Workload, main_for

__all__ = ["ByteWindows", "GPT", "GPTShape", "SHAPES", "build", "corpus", "main"]

NAME = "gpt"
_MODULES = (
    "argparse", "bisect", "calendar", "collections", "contextlib", "copy", "csv", "dataclasses",
    "datetime", "decimal", "difflib", "enum", "fractions", "functools", "heapq", "inspect",
    "itertools", "json", "logging", "os", "pathlib", "pickle", "pprint", "random", "re",
    "shutil", "statistics", "string", "subprocess", "tempfile", "textwrap", "threading",
    "typing", "unittest", "zipfile",
)  # fmt: skip


@dataclass(frozen=True)
class GPTShape:
    """Transformer shape and default training settings for one size."""

    vocab: int
    context: int
    """Tokens (bytes) per sequence."""
    layers: int
    heads: int
    dim: int
    batch_size: int
    lr: float
    cuda_only: bool = False


SHAPES = {
    "tiny": GPTShape(vocab=256, context=64, layers=3, heads=3, dim=48, batch_size=16, lr=3e-3),
    "small": GPTShape(vocab=256, context=256, layers=4, heads=4, dim=256, batch_size=16, lr=1e-3),
    # GPT-2 small's shape (124M); the vocabulary is padded to 50304 as nanoGPT does and
    # the byte stream uses its first 256 entries.
    "gpt2": GPTShape(
        vocab=50304, context=1024, layers=12, heads=12, dim=768, batch_size=8, lr=6e-4, cuda_only=True
    ),
}
"""Size name -> shape. tiny ~100k parameters (CPU); gpt2 124M (GPU only)."""


@functools.lru_cache(maxsize=1)
def corpus() -> bytes:
    """The training text: docstrings of a fixed list of standard-library modules, UTF-8."""
    parts: list[str] = []
    for module_name in _MODULES:
        module = importlib.import_module(module_name)
        parts.append(inspect.getdoc(module) or "")
        for name in sorted(getattr(module, "__all__", None) or dir(module)):
            if name.startswith("_"):
                continue
            doc = inspect.getdoc(getattr(module, name, None))
            if doc and doc not in parts:
                parts.append(f"{module_name}.{name}\n{doc}")
    return "\n\n".join(parts).encode("utf-8")


class ByteWindows(Dataset):
    """Every (input, next-byte target) pair of ``context`` bytes in ``data``."""

    def __init__(self, data: bytes, context: int) -> None:
        if len(data) <= context + 1:
            raise ValueError(f"text of {len(data)} bytes is too short for context {context}")
        self.data = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
        self.context = context

    def __len__(self) -> int:
        return len(self.data) - self.context - 1

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.data[i : i + self.context + 1]
        return chunk[:-1], chunk[1:]


class _Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class _Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = _Attention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Decoder-only transformer (pre-LayerNorm, learned positions, tied embedding/head)."""

    def __init__(self, shape: GPTShape) -> None:
        super().__init__()
        if shape.dim % shape.heads:
            raise ValueError(f"dim {shape.dim} is not divisible by heads {shape.heads}")
        self.tokens = nn.Embedding(shape.vocab, shape.dim)
        self.positions = nn.Embedding(shape.context, shape.dim)
        self.blocks = nn.ModuleList(_Block(shape.dim, shape.heads) for _ in range(shape.layers))
        self.ln_f = nn.LayerNorm(shape.dim)
        self.head = nn.Linear(shape.dim, shape.vocab, bias=False)
        self.head.weight = self.tokens.weight
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
        for block in self.blocks:  # GPT-2's scaled init of the residual projections
            nn.init.normal_(block.attn.proj.weight, std=0.02 / math.sqrt(2 * shape.layers))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits (batch, time, vocab) for byte ids (batch, time)."""
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tokens(idx) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def _next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def build(size: str = "tiny", *, batch_size: int | None = None, seed: int = 0) -> Workload:
    """A GPT on Python's own documentation as bytes (tiny ~100k params, context 64)."""
    if size not in SHAPES:
        raise ValueError(f"size: expected one of {', '.join(SHAPES)}; got {size!r}")
    shape = SHAPES[size]
    if shape.cuda_only and not torch.cuda.is_available():
        raise ValueError(f"size {size!r} needs a CUDA GPU; use --size tiny or small on this machine")
    torch.manual_seed(seed)
    model = GPT(shape)

    def make_optimizer(params, **kwargs) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=shape.lr, weight_decay=0.01, **kwargs)

    params = sum(p.numel() for p in model.parameters())
    return Workload(
        name=NAME,
        model=model,
        dataset=ByteWindows(corpus(), shape.context),
        loss_fn=_next_token_loss,
        make_optimizer=make_optimizer,
        batch_size=batch_size or shape.batch_size,
        description=f"GPT {shape.layers}x{shape.dim}, {params / 1e6:.2f}M params, context {shape.context}",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Script entry point; returns the exit code."""
    return main_for(NAME, build, argv)


if __name__ == "__main__":
    sys.exit(main())
