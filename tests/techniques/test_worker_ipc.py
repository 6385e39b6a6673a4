"""Worker batch hand-over: the sharing strategy is set inside each worker, and only there."""

from __future__ import annotations

import pickle

import pytest
import torch
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset, get_worker_info

from torchboost.techniques.cpu import CpuConfig
from torchboost.techniques.loader import LoaderConfig
from torchboost.env import probe
from torchboost.nocode import Applier
from torchboost.plan import Plan
from torchboost.techniques.loader import LoaderSettings, rebuild_loader, resolve_host
from torchboost.techniques.loader.worker_ipc import WorkerSharing, sharing_of, with_sharing
from torchboost.techniques.loader import LoaderTuning
from torchboost.tune.search.levers import TuneContext, default_levers

needs_file_system = pytest.mark.skipif(
    "file_system" not in mp.get_all_sharing_strategies(), reason="no file_system sharing on this platform"
)


class Reporting(Dataset):
    """Each item: its value, whether the worker that made it uses file_system, and a tag
    that the user's worker_init_fn sets in the worker (0 when it never ran)."""

    tag = 0

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> torch.Tensor:
        file_system = mp.get_sharing_strategy() == "file_system"
        return torch.tensor([float(i), float(file_system), float(self.tag)])


def tag_worker(worker_id: int) -> None:
    get_worker_info().dataset.tag = 7


def loader(**kwargs) -> DataLoader:
    return DataLoader(Reporting(), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3),
                      worker_init_fn=tag_worker, **kwargs)


def items(dl: DataLoader) -> torch.Tensor:
    return torch.cat(list(dl))


@needs_file_system
def test_rebuilt_loader_hands_over_by_file_system_with_the_same_batches():
    reference = items(loader())
    rebuilt = rebuild_loader(loader(), LoaderSettings(
        num_workers=2, pin_memory=False, persistent_workers=False, prefetch_factor=2, sharing_strategy="file_system"))
    got = items(rebuilt)
    assert torch.equal(got[:, 0], reference[:, 0])  # same samples, same order
    assert got[:, 1].eq(1).all()  # every batch came from a worker using file_system
    assert got[:, 2].eq(7).all()  # the user's own worker_init_fn still ran
    assert mp.get_sharing_strategy() != "file_system" or mp.get_all_sharing_strategies() == {"file_system"}
    assert LoaderSettings.of(rebuilt).sharing_strategy == "file_system"


@needs_file_system
def test_without_the_strategy_workers_keep_torchs_default():
    # The twin of the test above: the flag column must read 0 when nothing is set, or
    # the check above could not fail.
    rebuilt = rebuild_loader(loader(), LoaderSettings(
        num_workers=2, pin_memory=False, persistent_workers=False, prefetch_factor=2))
    got = items(rebuilt)
    assert got[:, 1].eq(0).all() and got[:, 2].eq(7).all()


def test_wrapper_pickles_for_spawned_workers_and_unwraps():
    wrapped = with_sharing(tag_worker, "file_system")
    again = pickle.loads(pickle.dumps(wrapped))
    assert isinstance(again, WorkerSharing) and again.strategy == "file_system" and again.inner is tag_worker
    assert with_sharing(wrapped, None) is tag_worker
    assert with_sharing(wrapped, "file_descriptor").inner is tag_worker  # never wrapped twice
    assert sharing_of(wrapped) == "file_system" and sharing_of(tag_worker) is None
    with pytest.raises(ValueError, match="file_descriptor, file_system"):
        WorkerSharing("shm")


def test_a_strategy_needs_workers():
    with pytest.raises(ValueError, match="num_workers > 0"):
        LoaderSettings(num_workers=0, pin_memory=False, persistent_workers=False, prefetch_factor=None,
                       sharing_strategy="file_system")


@needs_file_system
def test_resolve_auto_keeps_the_default_and_an_explicit_choice_is_used():
    env = probe()
    auto, _, reasons = resolve_host(LoaderConfig(num_workers=2), CpuConfig(), loader(), env, device="cpu")
    assert auto.sharing_strategy is None and "tune" in reasons["loader.sharing_strategy"]
    chosen, _, reasons = resolve_host(LoaderConfig(num_workers=2, sharing_strategy="file_system"), CpuConfig(),
                                      loader(), env, device="cpu")
    assert chosen.sharing_strategy == "file_system" and reasons["loader.sharing_strategy"] == "set in config"
    none, _, reasons = resolve_host(LoaderConfig(num_workers=0, sharing_strategy="file_system"), CpuConfig(),
                                    loader(), env, device="cpu")
    assert none.sharing_strategy is None and "no workers" in reasons["loader.sharing_strategy"]


@needs_file_system
def test_applied_from_outside_to_an_unmodified_loader():
    applier = Applier(Plan.applying({"loader.num_workers": 2, "loader.sharing_strategy": "file_system"})).install()
    try:
        got = items(loader())
    finally:
        applier.uninstall()
    assert got[:, 1].eq(1).all() and got[:, 2].eq(7).all()
    assert items(loader())[:, 1].eq(0).all()  # uninstalled: the next loader is the script's own


def test_tuner_tries_file_system_only_with_workers():
    lever = next(lv for lv in default_levers() if lv.id == "sharing")
    ctx = TuneContext(cpu_cores=2)
    assert lever.propose({}, ctx) == []
    assert lever.propose({"loader.num_workers": 2}, ctx) == [{"loader.sharing_strategy": "file_system"}]
    assert lever.propose({"loader.num_workers": 2}, TuneContext(tuning=(LoaderTuning(file_system_sharing=False),))) == []


@needs_file_system
def test_booster_applies_the_strategy_from_its_config():
    from torchboost import BoostConfig, Booster

    config = BoostConfig.off().replace(loader={"num_workers": 2, "persistent_workers": False,
                                               "prefetch_factor": 2, "sharing_strategy": "file_system"})
    model = torch.nn.Linear(3, 1)
    booster = Booster(config=config)
    _, _, prepared = booster.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), loader())
    got = items(prepared)
    assert got[:, 1].eq(1).all() and got[:, 2].eq(7).all()
    assert booster.resolved.config.loader.sharing_strategy == "file_system"


def test_host_lever_moves_workers_and_their_hand_over_together():
    host = next(lv for lv in default_levers() if lv.id == "host")
    sharing = next(lv for lv in default_levers() if lv.id == "sharing")
    proposed = host.propose({}, TuneContext(cpu_cores=2))
    with_workers = [c for c in proposed if c.get("loader.num_workers")]
    assert {c.get("loader.sharing_strategy") for c in with_workers} == {None, "file_system"}
    assert len(with_workers) == 2 * len({(c["loader.num_workers"], c["cpu.threads"]) for c in with_workers})
    no_file_system = TuneContext(cpu_cores=2, tuning=(LoaderTuning(file_system_sharing=False),))
    assert not any("loader.sharing_strategy" in c for c in host.propose({}, no_file_system))
    assert sharing.propose({"loader.num_workers": 2, "loader.sharing_strategy": "file_system"}, TuneContext()) == []
