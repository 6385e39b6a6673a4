"""nanoGPT's shakespeare_char transformer at its own width with a batch of 16: steps of about
three seconds on 2 cores (the shape the doctor's adaptive stop is measured on).

``python gpt_char_b16.py --steps N``: :mod:`gpt_char_full`'s model, twice its batch.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import gpt_char  # noqa: E402
from _common import train  # noqa: E402

gpt_char.LAYERS, gpt_char.WIDTH, gpt_char.HEADS, gpt_char.TOKENS, gpt_char.BATCH = 6, 384, 6, 256, 16

if __name__ == "__main__":
    train(gpt_char.build, gpt_char.loss)
