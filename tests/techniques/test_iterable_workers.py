"""No duplicated samples: workers are never raised for an IterableDataset that does not
shard by worker, by the Booster or by torchboost run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from torchboost.techniques.loader.loader_settings import shards_by_worker

SCRIPT = str(Path(__file__).resolve().parents[1] / "scripts" / "iterable_stream.py")


class _Unsharded(IterableDataset):
    def __iter__(self):
        return iter(range(8))


class _Sharded(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, 8, step))


def test_sharding_is_recognised_from_the_dataset_or_declared():
    assert shards_by_worker(torch.utils.data.TensorDataset(torch.zeros(2)))  # map-style: always
    assert shards_by_worker(_Sharded()) and not shards_by_worker(_Unsharded())
    assert shards_by_worker(_Unsharded(), declared=True)


def test_two_workers_on_an_unsharded_stream_really_duplicate_it():
    """Why the refusal matters (and the twin of the tests below): plain torch, 2 workers."""
    seen = list(DataLoader(_Unsharded(), batch_size=None, num_workers=2))
    assert len(seen) == 16 and len(set(seen)) == 8


@pytest.mark.slow
def test_torchboost_run_refuses_with_one_line_and_feeds_each_sample_once(tmp_path):
    (tmp_path / "torchboost.toml").write_text("[loader]\nnum_workers = 2\n")
    proc = subprocess.run([sys.executable, "-m", "torchboost.cli", "run", "--", "python", SCRIPT], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {"samples": 32, "distinct": 32, "workers": 0}
    assert sum("loader.num_workers=2 not applied" in line for line in proc.stderr.splitlines()) == 1


@pytest.mark.slow
def test_the_booster_refuses_too_unless_told_the_dataset_shards(tmp_path):
    (tmp_path / "torchboost.toml").write_text("[loader]\nnum_workers = 2\n")
    proc = subprocess.run([sys.executable, SCRIPT, "booster"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"samples": 32, "distinct": 32, "workers": 0}
    assert "does not shard by worker" in proc.stderr
    # declared: the user says it shards, so the workers are raised (and this stream duplicates)
    (tmp_path / "torchboost.toml").write_text("[loader]\nnum_workers = 2\nshards_by_worker = true\n")
    proc = subprocess.run([sys.executable, SCRIPT, "booster"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert json.loads(proc.stdout.strip().splitlines()[-1])["workers"] == 2
