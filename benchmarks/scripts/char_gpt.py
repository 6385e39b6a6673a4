"""A character-level GPT in the shape of nanoGPT's train.py, on synthetic text: plain PyTorch.

    python benchmarks/scripts/char_gpt.py [--max_iters 5000] [--batch_size 64] [--block_size 256]
        [--n_layer 6] [--n_head 6] [--n_embd 384] [--device auto|cuda|cpu]

nanoGPT's shakespeare_char configuration (6 layers x 384, 6 heads, 256 characters of context,
batch 64, dropout 0.2, AdamW with betas 0.9/0.99, gradient clipping at 1.0, an evaluation
every ``--eval_interval`` iterations) on text made here from a seeded generator, so it needs
no file and no network: sentences of made-up words, which the model can learn (the loss falls
from ln(vocabulary) toward the text's own entropy). Batches are drawn as nanoGPT's
``get_batch`` draws them: random windows of one long tensor, pinned and copied to the GPU
without blocking. Its own defaults are what a plain script has: fp32, eager, the optimizer as
torch builds it, no DataLoader; the device is CUDA when there is one.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class GPTConfig:
    """The model's shape, as nanoGPT's ``GPTConfig``."""

    block_size: int = 256
    """Context length, characters."""
    vocab_size: int = 65
    """Distinct characters."""
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384
    dropout: float = 0.2


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention through ``scaled_dot_product_attention``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if config.n_embd % config.n_head:
            raise ValueError(f"--n_embd {config.n_embd} is not divisible by --n_head {config.n_head}")
        self.n_head, self.dropout = config.n_head, config.dropout
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
                   for z in self.c_attn(x).split(c, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(b, t, c)))


class Block(nn.Module):
    """Pre-norm transformer block: attention, then a 4x GELU MLP, each on the residual."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(config.n_embd), nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.mlp = nn.Sequential(nn.Linear(config.n_embd, 4 * config.n_embd), nn.GELU(),
                                 nn.Linear(4 * config.n_embd, config.n_embd), nn.Dropout(config.dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Token and position embeddings, the blocks, a final norm, the head tied to the embedding."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():  # GPT-2's init, the residual projections scaled down
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * config.n_layer) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The mean next-character cross-entropy of ``idx`` (batch, time) against ``targets``."""
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(positions))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?'-\n012"
"""65 characters, as many as Shakespeare's."""


def synthetic_text(chars: int, seed: int = 0) -> torch.Tensor:
    """``chars`` character ids of sentences of made-up words (a seeded lexicon of 500 words
    of 2 to 9 letters, drawn with Zipf-like frequencies), as one int64 tensor."""
    rng = np.random.default_rng(seed)
    lexicon = ["".join(rng.choice(list(ALPHABET[:26]), size=rng.integers(2, 10))) for _ in range(500)]
    weights = 1.0 / np.arange(1, len(lexicon) + 1)
    words = rng.choice(len(lexicon), size=chars // 4, p=weights / weights.sum())
    ends = rng.choice(list(" " * 12 + ", ; . ! ?\n"), size=len(words))
    text = "".join(lexicon[w] + e for w, e in zip(words, ends))[:chars]
    index = {c: i for i, c in enumerate(ALPHABET)}
    return torch.tensor([index[c] for c in text], dtype=torch.long)


def get_batch(data: torch.Tensor, block_size: int, batch_size: int, device: torch.device):
    """Random windows of ``data`` and their next characters, on ``device`` (nanoGPT's get_batch)."""
    ix = torch.randint(len(data) - block_size - 1, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    if device.type == "cuda":  # pinned, so the copy does not block the host
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x, y


@torch.no_grad()
def estimate_loss(model: GPT, data: dict[str, torch.Tensor], args: argparse.Namespace,
                  device: torch.device) -> dict[str, float]:
    """Mean loss over ``--eval_iters`` batches of each split, in eval mode (as nanoGPT's)."""
    model.eval()
    out = {}
    for split, tokens in data.items():
        losses = torch.stack([model(*get_batch(tokens, args.block_size, args.batch_size, device))
                              for _ in range(args.eval_iters)])
        out[split] = losses.mean().item()  # a sync, once per evaluation
    model.train()
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, nanoGPT's names for nanoGPT's settings."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max_iters", type=int, default=5000)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--block_size", type=int, default=256)
    parser.add_argument("--n_layer", type=int, default=6)
    parser.add_argument("--n_head", type=int, default=6)
    parser.add_argument("--n_embd", type=int, default=384)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--grad_clip", type=float, default=1.0)
    parser.add_argument("--eval_interval", type=int, default=500)
    parser.add_argument("--eval_iters", type=int, default=20)
    parser.add_argument("--log_interval", type=int, default=50)
    parser.add_argument("--chars", type=int, default=1_000_000, help="length of the synthetic text")
    parser.add_argument("--device", default="auto", help="auto (CUDA when there is one), cuda or cpu")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Train for ``--max_iters`` iterations, logging the loss and evaluating now and then."""
    args = parse_args(argv)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    torch.manual_seed(1337)
    tokens = synthetic_text(args.chars)
    split = int(0.9 * len(tokens))
    data = {"train": tokens[:split], "val": tokens[split:]}
    config = GPTConfig(block_size=args.block_size, vocab_size=len(ALPHABET), n_layer=args.n_layer,
                       n_head=args.n_head, n_embd=args.n_embd, dropout=args.dropout)
    model = GPT(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, betas=(0.9, 0.99), weight_decay=0.1)
    print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters on {device}")
    start = time.perf_counter()
    for it in range(args.max_iters):
        if args.eval_interval and it % args.eval_interval == 0 and it:
            losses = estimate_loss(model, data, args, device)
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        x, y = get_batch(data["train"], args.block_size, args.batch_size, device)
        loss = model(x, y)
        loss.backward()
        if args.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if it % args.log_interval == 0:
            print(f"iter {it}: loss {loss.item():.4f}, {time.perf_counter() - start:.1f} s")  # a sync, as nanoGPT logs


if __name__ == "__main__":
    main()
