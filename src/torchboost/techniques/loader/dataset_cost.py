"""How long a batch takes to load in the main process: the fact behind ``auto`` workers.

Loader workers pay for themselves only when loading is slow: each batch then crosses a
process boundary (pickling, a queue) and, on a CPU box, every worker takes a core from
the compute. When a batch loads in well under a millisecond (in-memory tensors, token
windows), workers only add that overhead: in one run on a 2-core machine (not recorded in
``benchmarks/``), 2 workers made a host-bound MLP 0.36x and a byte-level GPT 0.56x as fast as
the same loop with none.
"""

from __future__ import annotations

import random
import time
from typing import Any

import torch

__all__ = ["CHEAP_BATCH_MS", "measure_batch_load_ms"]

CHEAP_BATCH_MS = 2.0
"""Below this many milliseconds per batch, ``auto`` keeps loading in the main process."""


def measure_batch_load_ms(dataset: Any, batch_size: int | None, *, samples: int = 4) -> float | None:
    """Estimated milliseconds to load one batch in this process: ``samples`` items timed.

    Random number generators (torch, Python, NumPy) are restored afterwards, so a
    dataset that draws random augmentations yields the same training run as without
    the measurement. Returns None when the dataset cannot be indexed or sized.
    """
    try:
        n = min(samples, len(dataset))
    except TypeError:
        return None
    if n == 0:
        return None
    state_py = random.getstate()
    state_np = _numpy_state()
    with torch.random.fork_rng(devices=[]):
        try:
            dataset[0]  # first touch: lazy opens and caches are not the steady cost
            start = time.perf_counter()
            for i in range(n):
                dataset[i]
            per_sample_ms = 1e3 * (time.perf_counter() - start) / n
        except Exception:  # noqa: BLE001 - an odd dataset: no measurement, the rule decides alone
            return None
        finally:
            random.setstate(state_py)
            _restore_numpy(state_np)
    return per_sample_ms * (batch_size or 1)


def _numpy_state() -> Any:
    try:
        import numpy as np  # only to save and restore its random state, around a timing
    except ImportError:
        return None
    return np.random.get_state()


def _restore_numpy(state: Any) -> None:
    if state is not None:
        import numpy as np

        np.random.set_state(state)
