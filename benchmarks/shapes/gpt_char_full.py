"""nanoGPT's shakespeare_char transformer at its own width: steps of about a second on 2 cores.

The model of config/train_shakespeare_char.py (6 layers x 384, 6 heads, 256 tokens,
dropout 0.2, AdamW, vocabulary 65) with a batch of 8 instead of 64, on random
characters: ``python gpt_char_full.py --steps N``. The layers are :mod:`gpt_char`'s, at
this size.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import gpt_char  # noqa: E402
from _common import train  # noqa: E402

gpt_char.LAYERS, gpt_char.WIDTH, gpt_char.HEADS, gpt_char.TOKENS, gpt_char.BATCH = 6, 384, 6, 256, 8

if __name__ == "__main__":
    train(gpt_char.build, gpt_char.loss)
