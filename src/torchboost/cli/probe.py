"""Measure this machine's limits: dense matmul throughput per native dtype, and memory bandwidth.

``torchboost probe [--refresh] [--threads N] [--device cpu|cuda] [--json]``

Runs once per machine (a few seconds) and keeps the figures in the user's cache folder
(``$XDG_CACHE_HOME/torchboost``, else ``~/.cache/torchboost``); later calls, and the
doctor, read them from there. ``--refresh`` measures again.
"""

from __future__ import annotations

import argparse
import sys

import torch

from torchboost import _json as strict_json
from torchboost.limits import machine_limits
from torchboost.report.limits_text import limits_lines

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``torchboost probe``."""
    parser.add_argument("--refresh", action="store_true", help="measure again, even when cached")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="torch threads for the CPU probe (default: torch's own count)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="what to probe (default: cuda when a GPU is present, else cpu)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``torchboost probe``; returns 0 (2 on bad usage)."""
    if args.command:
        print("torchboost probe: error: probe takes no command after --", file=sys.stderr)
        return 2
    if args.threads is not None and args.threads < 1:
        print(f"torchboost probe: error: --threads must be 1 or more, got {args.threads}", file=sys.stderr)
        return 2
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("torchboost probe: error: --device cuda: no CUDA device here; use --device cpu", file=sys.stderr)
        return 2
    limits, cached = machine_limits(device, args.threads, refresh=args.refresh)
    if args.json:
        sys.stdout.write(strict_json.dumps({**limits.to_dict(), "cached": cached}, indent=1) + "\n")
        return 0
    how = "from the cache (--refresh measures again)" if cached else f"measured in {limits.seconds:.1f} s"
    print(f"torchboost probe: {limits.name or limits.device}, {limits.threads} threads, "
          f"torch {limits.torch_version}; {how}")
    for line in limits_lines(limits):
        print(f"  {line}")
    return 0
