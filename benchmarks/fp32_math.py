"""bf16 math in fp32 matmuls (``[fp32_math] mode = "bf16"``) against plain fp32, on
transformer shapes, measured in one process with the two settings interleaved step by step.

    python benchmarks/fp32_math.py [--steps 12] [--shapes small,shakespeare_char]

Each shape trains a GPT-like model (pre-norm blocks, causal SDPA attention, AdamW) on random
tokens. For every measured step the process switches torch's setting
(``torch.backends.mkldnn.matmul.fp32_precision`` and ``.conv``) in turn, so a neighbour
taking the CPU slows both sides alike; the table gives each side's median step and the
median of the per-pair ratios, and the doctor's own estimate for comparison comes from
``torchboost doctor``. It also prints the CPU model and its bf16 flags.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch
from torch import nn

SHAPES = {
    "small": dict(layers=4, width=128, heads=4, tokens=64, batch=12, dropout=0.0),
    "shakespeare_char": dict(layers=6, width=384, heads=6, tokens=256, batch=16, dropout=0.2),
    "shakespeare_char_nodrop": dict(layers=6, width=384, heads=6, tokens=256, batch=16, dropout=0.0),
}
VOCAB = 65


class Block(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                       dropout_p=self.dropout if self.training else 0.0)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


def _model(layers: int, width: int, heads: int, tokens: int, dropout: float, **_: int) -> nn.Module:
    return nn.Sequential(nn.Embedding(VOCAB, width), *(Block(width, heads, dropout) for _ in range(layers)),
                         nn.LayerNorm(width), nn.Linear(width, VOCAB))


def _set(mode: str) -> None:
    torch.backends.mkldnn.matmul.fp32_precision = mode
    torch.backends.mkldnn.conv.fp32_precision = mode


def measure(shape: dict, steps: int) -> tuple[float, float, list[float]]:
    """(fp32 ms, bf16-math ms, each pair's ratio) over ``steps`` interleaved pairs, the order
    alternating, after 2 warm-up pairs."""
    torch.manual_seed(0)
    model = _model(**shape)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    x = torch.randint(0, VOCAB, (shape["batch"], shape["tokens"]))
    y = torch.randint(0, VOCAB, (shape["batch"], shape["tokens"]))

    def step(mode: str) -> float:
        _set(mode)
        start = time.perf_counter()
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return (time.perf_counter() - start) * 1e3

    for _ in range(2):
        step("none"), step("bf16")
    pairs = []
    for i in range(steps):
        if i % 2 == 0:
            pairs.append((step("none"), step("bf16")))
        else:
            bf16 = step("bf16")
            pairs.append((step("none"), bf16))
    _set("none")
    return (statistics.median(a for a, _ in pairs), statistics.median(b for _, b in pairs),
            [a / b for a, b in pairs])


def _cpu() -> str:
    try:
        info = open("/proc/cpuinfo").read()
        model = next(line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name"))
        flags = next(line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return platform.processor()
    bf16 = [f for f in flags if f in ("avx512_bf16", "amx_bf16", "amx_tile", "avx512f")]
    return f"{model}; {', '.join(bf16) or 'no avx512/amx'}; {torch.get_num_threads()} threads"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--shapes", default="small,shakespeare_char,shakespeare_char_nodrop")
    args = parser.parse_args()
    print(f"CPU: {_cpu()}; torch {torch.__version__}; load {os.getloadavg()[0]:.1f}")
    print("| shape | fp32 ms/step | bf16 math ms/step | ratio: median of pairs (range) | ratio of the medians |")
    print("|---|---:|---:|---:|---:|")
    for name in args.shapes.split(","):
        fp32, bf32, ratios = measure(SHAPES[name], args.steps)
        print(f"| {name} | {fp32:.1f} | {bf32:.1f} | {statistics.median(ratios):.2f}x ({min(ratios):.2f}-"
              f"{max(ratios):.2f}) | {fp32 / bf32:.2f}x |", flush=True)
    print(f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
