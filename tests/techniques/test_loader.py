"""Loader technique: rebuilt loaders yield the same batches; auto rules on hand-made machines."""

from __future__ import annotations

import dataclasses
import random
import time
import warnings
from collections import OrderedDict, namedtuple

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, SubsetRandomSampler

from torchboost.techniques.cpu import CpuConfig
from torchboost.techniques.loader import LoaderConfig
from torchboost.env import probe
from torchboost.techniques.loader.loader_auto import GiB
from torchboost.techniques.loader import (
    DeviceLoader,
    LoaderSettings,
    auto_num_workers,
    move_to_device,
    rebuild_loader,
    resolve_host,
)
from torchboost.techniques.loader import loader_auto as loader_mod
from torchboost.techniques.memory import to_channels_last

# The hand-made machines have more cores than this one; torch's warning about it is noise here.
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

CPU = torch.device("cpu")
CUDA = torch.device("cuda")  # a descriptor only: nothing is allocated on it in these tests


class Squares(Dataset):
    def __init__(self, n: int = 37):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return torch.tensor([float(i), float(i * i)]), i % 3


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(10))


def pair_collate(items):
    """A custom collate: stacked features, labels, and the indices as a plain list."""
    xs, ys = zip(*items)
    return {"x": torch.stack(xs), "y": torch.tensor(ys), "ids": [int(x[0]) for x in xs]}


def make_loader(seed: int = 0, **overrides) -> DataLoader:
    kwargs = dict(
        batch_size=4,
        shuffle=True,
        collate_fn=pair_collate,
        drop_last=True,
        generator=torch.Generator().manual_seed(seed),
    )
    kwargs.update(overrides)
    return DataLoader(Squares(), **kwargs)


def collect(loader, epochs: int = 2) -> list:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*pin_memory.*")
        return [batch for _ in range(epochs) for batch in loader]


def assert_same_batches(reference: DataLoader, candidate: DataLoader, epochs: int = 2) -> None:
    """Both loaders yield equal batches in the same order over ``epochs`` epochs."""
    a, b = collect(reference, epochs), collect(candidate, epochs)
    assert len(a) == len(b), f"{len(a)} batches vs {len(b)}"
    for i, (x, y) in enumerate(zip(a, b)):
        assert x["ids"] == y["ids"], f"batch {i}: {x['ids']} vs {y['ids']}"
        assert torch.equal(x["x"], y["x"]) and torch.equal(x["y"], y["y"]), f"batch {i} differs"


def _broken_rebuild_without_generator(loader: DataLoader, settings: LoaderSettings) -> DataLoader:
    # What a naive rebuild does: re-pass the user's arguments but forget the generator.
    return DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        shuffle=True,
        collate_fn=loader.collate_fn,
        drop_last=loader.drop_last,
        num_workers=settings.num_workers,
        pin_memory=settings.pin_memory,
    )


def _broken_rebuild_without_sampler(loader: DataLoader, settings: LoaderSettings) -> DataLoader:
    return DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        collate_fn=loader.collate_fn,
        drop_last=loader.drop_last,
        generator=loader.generator,
        num_workers=settings.num_workers,
    )


SETTINGS = [
    LoaderSettings(num_workers=2, pin_memory=False, persistent_workers=False, prefetch_factor=2),
    LoaderSettings(num_workers=2, pin_memory=True, persistent_workers=False, prefetch_factor=3),
    LoaderSettings(num_workers=0, pin_memory=True, persistent_workers=False, prefetch_factor=None),
]


@pytest.mark.parametrize("settings", SETTINGS, ids=["w2", "w2-pin-prefetch3", "w0-pin"])
def test_rebuilt_loader_yields_same_batches_in_same_order(settings):
    rebuilt = rebuild_loader(make_loader(seed=7), settings)
    assert LoaderSettings.of(rebuilt) == settings
    assert (rebuilt.batch_size, rebuilt.drop_last, rebuilt.collate_fn) == (4, True, pair_collate)
    assert_same_batches(make_loader(seed=7), rebuilt, epochs=2)


def test_persistent_workers_keep_the_first_epoch_exactly():
    # torch draws the workers' base seed from the generator once per iterator; persistent
    # workers keep one iterator, so later epochs shuffle from another generator state.
    settings = LoaderSettings(num_workers=2, pin_memory=False, persistent_workers=True, prefetch_factor=2)
    assert_same_batches(make_loader(seed=7), rebuild_loader(make_loader(seed=7), settings), epochs=1)


def test_comparison_catches_a_rebuild_that_drops_the_generator():
    broken = _broken_rebuild_without_generator(make_loader(seed=7), SETTINGS[0])
    with pytest.raises(AssertionError):
        assert_same_batches(make_loader(seed=7), broken)


def test_custom_sampler_is_kept_and_its_loss_is_caught():
    def user_loader():
        g = torch.Generator().manual_seed(3)
        sampler = SubsetRandomSampler(list(range(5, 37)), generator=g)
        return DataLoader(Squares(), batch_size=4, sampler=sampler, collate_fn=pair_collate)

    settings = LoaderSettings(num_workers=2, pin_memory=False, persistent_workers=False, prefetch_factor=2)
    assert_same_batches(user_loader(), rebuild_loader(user_loader(), settings))
    with pytest.raises(AssertionError):
        assert_same_batches(user_loader(), _broken_rebuild_without_sampler(user_loader(), settings))


def test_user_batch_sampler_and_unbatched_loaders_are_rebuilt_faithfully():
    settings = LoaderSettings(num_workers=0, pin_memory=True, persistent_workers=False, prefetch_factor=None)

    def batched():
        g = torch.Generator().manual_seed(5)
        sampler = torch.utils.data.BatchSampler(
            torch.utils.data.RandomSampler(Squares(), generator=g), batch_size=3, drop_last=False
        )
        return DataLoader(Squares(), batch_sampler=sampler, collate_fn=pair_collate)

    assert_same_batches(batched(), rebuild_loader(batched(), settings))

    unbatched = DataLoader(Squares(5), batch_size=None)
    rebuilt = rebuild_loader(unbatched, settings)
    assert rebuilt.batch_size is None
    assert [int(x[0]) for x, _ in collect(rebuilt, 1)] == [0, 1, 2, 3, 4]


def test_rebuild_returns_same_object_when_nothing_changes():
    loader = make_loader()
    assert rebuild_loader(loader, LoaderSettings.of(loader)) is loader


def test_rebuild_refuses_a_subclass_it_cannot_construct():
    class MyLoader(DataLoader):
        pass

    loader = MyLoader(Squares(), batch_size=4)
    with pytest.raises(TypeError, match="keep"):
        rebuild_loader(loader, SETTINGS[0])


def test_settings_refuse_worker_options_without_workers():
    with pytest.raises(ValueError, match="num_workers > 0"):
        LoaderSettings(num_workers=0, pin_memory=False, persistent_workers=True, prefetch_factor=None)
    with pytest.raises(ValueError, match="num_workers > 0"):
        LoaderSettings(num_workers=0, pin_memory=False, persistent_workers=False, prefetch_factor=2)


# --- auto rules on hand-made machines ---------------------------------------------------


def machine(cores: int, ram_gib: float, device: str, **extra):
    return dataclasses.replace(
        probe(),
        cpu_cores=cores,
        device=device,
        ram_bytes=int(max(ram_gib, 1) * GiB),
        ram_available_bytes=int(ram_gib * GiB),
        **extra,
    )


@pytest.fixture
def threads16(monkeypatch):
    """torch reports 16 intra-op threads while a test runs (restored afterwards), and
    batches count as slow to load (10 ms), so the worker rules are what is tested."""
    monkeypatch.setattr(loader_mod, "measure_batch_load_ms", lambda dataset, batch_size: 10.0)
    before = torch.get_num_threads()
    torch.set_num_threads(16)
    yield 16
    torch.set_num_threads(before)


def test_cheap_batches_keep_loading_in_the_main_process():
    env = machine(2, 24, "cpu")
    settings, threads, reasons = resolve_host(LoaderConfig(), CpuConfig(), make_loader(), env, device=CPU)
    assert settings.num_workers == 0
    assert "loads in" in reasons["loader.num_workers"] and "ms" in reasons["loader.num_workers"]


class _RandomAugment(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        time.sleep(0.001)
        return torch.rand(3) + np.random.rand() + random.random()


def test_measuring_the_load_cost_leaves_random_streams_as_they_were():
    from torchboost.techniques.loader.dataset_cost import measure_batch_load_ms

    def draws():
        return (torch.rand(2).tolist(), np.random.rand(), random.random())

    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    expected = draws()
    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    ms = measure_batch_load_ms(_RandomAugment(), 16)
    assert ms is not None and ms >= 16 * 1.0  # 1 ms per sample, 16 per batch
    assert draws() == expected
    # The broken twin: the same calls without restoring change what the run draws next.
    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    _RandomAugment()[0]
    assert draws() != expected


def test_small_cpu_box_gives_workers_the_cores(threads16):
    env = machine(2, 24, "cpu")
    settings, threads, reasons = resolve_host(LoaderConfig(), CpuConfig(), make_loader(), env, device=CPU)
    assert settings == LoaderSettings(num_workers=2, pin_memory=False, persistent_workers=True, prefetch_factor=2)
    assert threads == 1, reasons["cpu.threads"]
    assert set(reasons) == {
        "loader.num_workers", "loader.pin_memory", "loader.persistent_workers",
        "loader.prefetch_factor", "loader.sharing_strategy", "cpu.threads",
    }
    assert "CPU" in reasons["loader.num_workers"] and "CUDA" in reasons["loader.pin_memory"]


def test_cuda_workstation_gets_many_workers_and_pinned_memory(threads16):
    env = machine(16, 64, "cuda")
    loader = make_loader(num_workers=4, prefetch_factor=4)
    settings, threads, _ = resolve_host(LoaderConfig(), CpuConfig(), loader, env, device=CUDA)
    assert settings == LoaderSettings(num_workers=8, pin_memory=True, persistent_workers=True, prefetch_factor=4)
    assert threads == 8


@pytest.mark.parametrize(
    "cores, ram_gib, device, local, expected",
    [
        (2, 24, "cpu", 1, 2),      # the measured box: 2 workers, 1 thread
        (1, 24, "cpu", 1, 0),      # one core: nothing to parallelise
        (16, 24, "cpu", 1, 4),     # a quarter of the cores
        (64, 256, "cpu", 1, 8),    # capped
        (16, 1.5, "cpu", 1, 0),    # RAM allows one worker; one alone is slower than none
        (16, 3, "cuda", 1, 1),     # RAM allows one worker on CUDA
        (16, 64, "cuda", 1, 8),
        (4, 16, "cuda", 1, 3),
        (2, 24, "cuda", 1, 1),
        (16, 64, "cuda", 4, 3),    # four local processes share 16 cores
        (16, 64, "cpu", 4, 2),
    ],
)
def test_auto_num_workers_rule(cores, ram_gib, device, local, expected):
    workers, reason = auto_num_workers(
        cpu_cores=cores, ram_available_bytes=int(ram_gib * GiB), device_type=device, local_processes=local
    )
    assert workers == expected, reason
    assert "RAM" in reason


def test_low_ram_machine_bounds_workers_through_resolve_host(threads16):
    env = machine(16, 1.5, "cpu")
    settings, threads, reasons = resolve_host(LoaderConfig(), CpuConfig(), make_loader(), env, device=CPU)
    assert settings.num_workers == 0 and settings.prefetch_factor is None and not settings.persistent_workers
    assert threads is None, reasons["cpu.threads"]
    assert "1.5 GiB" in reasons["loader.num_workers"]


def test_torchrun_local_world_size_splits_the_machine(threads16):
    env = machine(16, 64, "cuda", dist_env={"LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "4"})
    settings, threads, _ = resolve_host(LoaderConfig(), CpuConfig(), make_loader(), env, device=CUDA)
    assert settings.num_workers == 3 and threads == 1


def test_workers_not_more_than_batches(threads16):
    tiny = DataLoader(Squares(8), batch_size=4)
    settings, _, reasons = resolve_host(LoaderConfig(), CpuConfig(), tiny, machine(16, 64, "cuda"), device=CUDA)
    assert settings.num_workers == 2 and "2 batches" in reasons["loader.num_workers"]


def test_iterable_dataset_keeps_its_workers_unless_it_shards_by_worker():
    env = machine(16, 64, "cuda")
    stream = DataLoader(Stream(), batch_size=2)
    settings, _, reasons = resolve_host(LoaderConfig(), CpuConfig(), stream, env, device=CUDA)
    assert settings.num_workers == 0 and "IterableDataset" in reasons["loader.num_workers"]
    explicit = LoaderConfig(num_workers=2)
    with pytest.warns(UserWarning, match="does not shard by worker"):
        settings, _, reasons = resolve_host(explicit, CpuConfig(), stream, env, device=CUDA)
    assert settings.num_workers == 0 and reasons["loader.num_workers"].startswith("refused 2, kept 0")
    declared = LoaderConfig(num_workers=2, shards_by_worker=True)
    settings, _, reasons = resolve_host(declared, CpuConfig(), stream, env, device=CUDA)
    assert settings.num_workers == 2 and reasons["loader.num_workers"] == "set in config"
    rebuilt = rebuild_loader(stream, dataclasses.replace(settings, num_workers=0, persistent_workers=False, prefetch_factor=None, pin_memory=True))
    assert [b.tolist() for b in collect(rebuilt, 1)] == [b.tolist() for b in collect(stream, 1)]


def test_keep_and_explicit_values(threads16):
    loader = make_loader(num_workers=3, pin_memory=False, persistent_workers=False, prefetch_factor=5)
    keep = LoaderConfig(num_workers="keep", pin_memory="keep", persistent_workers="keep", prefetch_factor="keep")
    settings, threads, _ = resolve_host(keep, CpuConfig(threads="keep"), loader, machine(16, 64, "cuda"), device=CUDA)
    assert settings == LoaderSettings.of(loader) and threads is None
    assert rebuild_loader(loader, settings) is loader

    explicit = LoaderConfig(num_workers=0, pin_memory=True, persistent_workers=True, prefetch_factor=4)
    settings, threads, reasons = resolve_host(explicit, CpuConfig(threads=3), loader, machine(2, 24, "cpu"), device=CPU)
    assert settings == LoaderSettings(num_workers=0, pin_memory=True, persistent_workers=False, prefetch_factor=None)
    assert threads == 3
    assert reasons["loader.persistent_workers"].startswith("ignored")
    assert reasons["loader.prefetch_factor"].startswith("ignored")
    assert "no effect" in reasons["loader.pin_memory"]


def test_no_loader_and_foreign_loaders():
    env = machine(2, 24, "cpu")
    settings, threads, reasons = resolve_host(LoaderConfig(), CpuConfig(), None, env, device=CPU)
    assert settings is None and threads is None
    assert reasons["loader.num_workers"] == "no DataLoader given"

    settings, _, reasons = resolve_host(LoaderConfig(), CpuConfig(), [1, 2], env, device=CPU)
    assert settings is None and "not a torch DataLoader" in reasons["loader.pin_memory"]

    class MyLoader(DataLoader):
        pass

    mine = MyLoader(Squares(), batch_size=4)
    settings, _, reasons = resolve_host(LoaderConfig(), CpuConfig(), mine, env, device=CPU)
    assert settings == LoaderSettings.of(mine) and "subclass" in reasons["loader.num_workers"]


# --- moving batches ------------------------------------------------------------------------

Pair = namedtuple("Pair", "x y")


@dataclasses.dataclass(frozen=True)
class Batch:
    image: torch.Tensor
    label: torch.Tensor
    name: str


def test_move_to_device_walks_every_structure():
    t = torch.ones(2, 3)
    batch = {
        "pair": Pair(t, [t, (t, "s")]),
        "dc": Batch(t, t.long(), "n"),
        "od": OrderedDict(a=t),
        "n": 3,
    }
    out = move_to_device(batch, "meta")  # a real move without a GPU
    assert out["pair"].x.device.type == "meta" and isinstance(out["pair"], Pair)
    assert out["pair"].y[0].is_meta and out["pair"].y[1][0].is_meta and out["pair"].y[1][1] == "s"
    assert isinstance(out["dc"], Batch) and out["dc"].image.is_meta and out["dc"].name == "n"
    assert isinstance(out["od"], OrderedDict) and out["od"]["a"].is_meta
    assert out["n"] == 3
    assert batch["pair"].x.device.type == "cpu"  # the input is not modified
    assert move_to_device(t, CPU) is t  # already there: no copy


def test_device_loader_moves_transforms_and_passes_through():
    loader = DataLoader(torch.randn(8, 3, 4, 4), batch_size=4)
    wrapped = DeviceLoader(loader, "meta", non_blocking=False)
    batches = list(wrapped)
    assert len(batches) == len(wrapped) == 2 and all(b.is_meta for b in batches)
    assert wrapped.dataset is loader.dataset and wrapped.batch_size == 4
    assert wrapped.sampler is loader.sampler and wrapped.loader is loader
    assert wrapped.num_workers == 0  # other attributes come from the loader

    on_cpu = DeviceLoader(loader, CPU, non_blocking=True, transform=to_channels_last)
    for original, moved in zip(loader, on_cpu):
        assert torch.equal(original, moved)
        assert moved.is_contiguous(memory_format=torch.channels_last)


def test_the_host_levers_bound_comes_from_the_doctors_load_time_and_dataless_step():
    """A script that loads its batches itself (22 ms of a 34 ms step, replayed at 12.8 ms):
    one worker cannot step under 22 ms, two under 11 (12.8 at torch's own 2 threads). Twin:
    a loader with workers already gives no bound (its wait is not a load time)."""
    import dataclasses

    from torchboost.config import Overlay
    from torchboost.evidence.observed import Facts, LoaderFacts, StepRecord
    from torchboost.techniques.loader.loader_tuning import LoaderTuning, host_floor, loader_tune_context
    from torchboost.techniques.registry import TuneContext

    steps = [StepRecord(i, 34.0, data_ms=22.0, forward_ms=5.0, backward_ms=7.0) for i in range(10)]
    facts = Facts(env={"device": "cpu", "cpu_cores": 2}, steps=steps, loader=LoaderFacts(num_workers=0),
                  replay_step_ms=[12.8, 12.9, 12.7], cpu_threads=2)
    ctx = TuneContext(cpu_cores=2, tuning=(loader_tune_context(facts),))
    loader = ctx.own(LoaderTuning)
    assert (loader.batch_load_ms, loader.dataless_step_ms, loader.dataless_threads) == (22.0, 12.8, 2)

    def bound(workers, threads):
        change = Overlay({"cpu.threads": threads} | ({"loader.num_workers": workers} if workers else {}))
        return host_floor(change, ctx)[0]

    assert bound(1, 1) == 22.0 and bound(2, 1) == 11.0 and bound(2, 2) == 12.8 and bound(0, 1) == 22.0
    busy = dataclasses.replace(facts, loader=LoaderFacts(num_workers=2))
    assert loader_tune_context(busy).batch_load_ms is None
