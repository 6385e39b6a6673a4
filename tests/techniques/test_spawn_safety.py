"""Loader workers started by spawn (macOS's and Windows' default; here, a loader's
multiprocessing_context="spawn", or the start method set to spawn, as on macOS) are
proposed and applied only where they can start: the dataset pickles and the script has a
__main__ guard (in a notebook: nothing of the dataset defined in the notebook).

torch takes a loader's multiprocessing_context only with workers, so a loader with none
starts them by the process's start method: the tests below set it to spawn, as macOS has it."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from torchboost.config import Overlay
from torchboost.env import probe
from torchboost.evidence.observed import LoaderFacts
from torchboost.observe.probes.describe import describe_loader
from torchboost.techniques.cpu import CpuConfig
from torchboost.techniques.loader import LoaderConfig, resolve_host
from torchboost.techniques.loader.loader_auto import GiB
from torchboost.techniques.loader.loader_diagnosis import data_workers
from torchboost.techniques.loader.loader_tuning import LoaderTuning, host_candidates, workers_of
from torchboost.techniques.loader.spawn_safety import main_file_guarded, spawn_refusal, start_method
from torchboost.techniques._tuning import TuneContext

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "diagnose"))
from _diagnose_helpers import make_facts  # noqa: E402

GUARDED = "import torch\n\nif __name__ == \"__main__\":\n    pass\n"
UNGUARDED = "import torch\nx = 1\n"


class _Slow(Dataset):
    """A map-style dataset that takes 3 ms a sample, with a transform that does not pickle."""

    def __init__(self, transform=lambda x: x):
        self.transform = transform

    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(0.003)
        return self.transform(torch.full((4,), float(i)))


def _data() -> TensorDataset:
    return TensorDataset(torch.randn(64, 4))


def test_the_start_method_is_the_loaders_else_the_platforms():
    assert start_method("spawn") == "spawn"
    assert start_method(torch.multiprocessing.get_context("forkserver")) == "forkserver"
    assert start_method(None) in ("fork", "spawn", "forkserver")


def test_under_spawn_a_dataset_that_does_not_pickle_is_refused(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(GUARDED)
    said = spawn_refusal(_Slow(), "spawn", main_file=str(script))
    assert said.startswith("_Slow does not pickle (") and "workers started by spawn get the dataset pickled" in said
    assert spawn_refusal(_Slow(transform=torch.neg), "spawn", main_file=str(script)) is None  # twin: it pickles


def test_twin_under_fork_nothing_is_refused():
    assert spawn_refusal(_Slow(), "fork", main_file=None) is None


def test_under_spawn_a_script_without_a_main_guard_is_refused(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(UNGUARDED)
    assert main_file_guarded(script) is False
    assert "train.py has no `if __name__ == \"__main__\":` guard" in spawn_refusal(_data(), "spawn",
                                                                                 main_file=str(script))
    script.write_text(GUARDED)  # the twin
    assert main_file_guarded(script) and spawn_refusal(_data(), "spawn", main_file=str(script)) is None


class NotebookData(Dataset):
    def __len__(self):
        return 1


NotebookData.__module__ = "__main__"  # as a class defined in a notebook cell is


def test_in_a_notebook_a_dataset_defined_there_is_refused(monkeypatch):
    monkeypatch.setitem(sys.modules, "__main__", type(sys)("__main__"))  # a notebook's: no __file__
    monkeypatch.setattr(sys.modules["__main__"], "NotebookData", NotebookData, raising=False)
    notebook = NotebookData
    said = spawn_refusal(notebook(), "spawn")
    assert said.startswith("NotebookData is defined in the notebook") and ".py module" in said
    assert spawn_refusal(_data(), "spawn") is None  # twin: torch's own class imports anywhere


def _tensor_pickled(monkeypatch) -> list[int]:
    """Each tensor pickled by value from now on, by its byte count (none leaves this process)."""
    pickled: list[int] = []
    real = torch.Tensor.__reduce_ex__

    def reduce_ex(tensor, protocol):
        pickled.append(tensor.numel() * tensor.element_size())
        return real(tensor, protocol)

    monkeypatch.setattr(torch.Tensor, "__reduce_ex__", reduce_ex)
    return pickled


def test_the_pickling_probe_copies_no_tensor_bytes(monkeypatch):
    big = TensorDataset(torch.empty(2**20, dtype=torch.uint8))
    pickled = _tensor_pickled(monkeypatch)
    assert spawn_refusal(big, "spawn", main_file=None) is None
    assert pickled == []  # the payload was never asked for its bytes


def test_twin_plain_pickling_copies_the_tensor_bytes(monkeypatch):
    import io
    import pickle

    big = TensorDataset(torch.empty(2**20, dtype=torch.uint8))
    pickled = _tensor_pickled(monkeypatch)
    pickle.dump(big, io.BytesIO())
    assert pickled == [2**20]


@pytest.fixture
def spawn_default(monkeypatch):
    """This process's start method reads as spawn, macOS's default (nothing is started here)."""
    monkeypatch.setattr("multiprocessing.get_start_method", lambda allow_none=False: "spawn")


def test_a_loader_without_workers_starts_them_by_the_process_start_method(spawn_default):
    assert start_method(None) == "spawn" and start_method("fork") == "fork"


def _machine():
    return dataclasses.replace(probe(), cpu_cores=16, device="cpu", ram_bytes=64 * GiB, ram_available_bytes=64 * GiB)


def test_auto_proposes_no_spawn_workers_for_a_dataset_that_does_not_pickle(monkeypatch):
    loader = DataLoader(_Slow(), batch_size=4)
    monkeypatch.setattr("multiprocessing.get_start_method", lambda allow_none=False: "spawn")
    settings, _, reasons = resolve_host(LoaderConfig(), CpuConfig(), loader, _machine(), device=torch.device("cpu"))
    assert settings.num_workers == 0 and "does not pickle" in reasons["loader.num_workers"]
    monkeypatch.setattr("multiprocessing.get_start_method", lambda allow_none=False: "fork")  # the twin
    settings, _, _ = resolve_host(LoaderConfig(), CpuConfig(), loader, _machine(), device=torch.device("cpu"))
    assert settings.num_workers > 0


def test_a_number_of_workers_in_the_file_is_refused_with_a_warning_under_spawn(spawn_default):
    loader = DataLoader(_Slow(), batch_size=4)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        settings, _, reasons = resolve_host(LoaderConfig(num_workers=2), CpuConfig(), loader, _machine(),
                                            device=torch.device("cpu"))
    assert settings.num_workers == 0 and "refused 2, kept 0" in reasons["loader.num_workers"]
    assert any("does not pickle" in str(w.message) for w in seen)


def test_the_doctor_sees_the_refusal_and_proposes_no_workers(monkeypatch):
    monkeypatch.setattr("multiprocessing.get_start_method", lambda allow_none=False: "spawn")
    facts = describe_loader(DataLoader(_Slow(), batch_size=4))
    assert "does not pickle" in facts.workers_refused
    monkeypatch.setattr("multiprocessing.get_start_method", lambda allow_none=False: "fork")
    assert describe_loader(DataLoader(_Slow(), batch_size=4)).workers_refused is None
    waiting = dataclasses.replace(make_facts(data=60.0), loader=LoaderFacts(num_workers=0))
    assert data_workers(waiting) is not None  # the twin: the same wait, workers possible, proposes them
    refused = dataclasses.replace(waiting, loader=LoaderFacts(num_workers=0, workers_refused=facts.workers_refused))
    assert data_workers(refused) is None


def test_tune_tries_no_worker_counts_where_workers_cannot_start():
    can = host_candidates(Overlay(), TuneContext(cpu_cores=4))
    cannot = host_candidates(Overlay(), TuneContext(cpu_cores=4, tuning=(LoaderTuning(workers_refused=True),)))
    assert any(workers_of(c) for c in can) and not any(workers_of(c) for c in cannot)


SCRIPT = '''import json, sys, torch, torchboost
from torch.utils.data import DataLoader, TensorDataset

def train():
    torch.multiprocessing.set_start_method("spawn", force=True)  # macOS's default
    loader = DataLoader(TensorDataset(torch.arange(32.0).view(16, 2)), batch_size=4)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    booster = torchboost.Booster({"loader": {"num_workers": 2}}, verbose=False)
    model, optimizer, loader = booster.prepare(model, optimizer, loader)
    seen = []
    for (x,) in loader:
        booster.backward(model(x).sum())
        optimizer.step()
        optimizer.zero_grad()
        seen.append(x[0, 0].item())
    print(json.dumps({"workers": booster.resolved.details["loader"].num_workers, "first": seen}))
'''


@pytest.mark.slow
@pytest.mark.parametrize("guarded", [True, False])
def test_spawn_workers_start_from_a_guarded_script_and_are_refused_without_the_guard(tmp_path, guarded):
    tail = 'if __name__ == "__main__":\n    train()\n' if guarded else "train()\n"
    (tmp_path / "train.py").write_text(SCRIPT + tail)
    done = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["first"] == [0.0, 8.0, 16.0, 24.0]  # the same batches either way
    assert said["workers"] == (2 if guarded else 0)  # two real spawned workers, or none, said why
    assert guarded or "has no `if __name__" in done.stderr
