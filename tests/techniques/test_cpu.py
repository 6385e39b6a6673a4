"""CPU technique: the intra-op thread rule, on hand-made machines."""

from __future__ import annotations

import pytest
import torch

from torchboost.techniques.cpu import CpuConfig
from torchboost.techniques.cpu import apply_threads, auto_threads, resolve_threads


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    "cores, workers, device, current, local, expected",
    [
        (2, 2, "cpu", 2, 1, 1),       # the measured box: 2 workers + 1 thread was fastest
        (2, 0, "cpu", 2, 1, None),    # nothing competes: torch's default kept
        (16, 4, "cpu", 16, 1, 12),
        (16, 4, "cpu", 8, 1, None),   # torch's default (physical cores) already fits: never raised
        (16, 8, "cuda", 16, 1, 8),
        (16, 3, "cuda", 16, 4, 1),    # four local processes: 4 cores each
        (4, 8, "cuda", 4, 1, 1),      # more workers than cores: at least one thread
    ],
)
def test_auto_threads_rule(cores, workers, device, current, local, expected):
    threads, reason = auto_threads(
        cpu_cores=cores, workers=workers, device_type=device, current_threads=current, local_processes=local
    )
    assert threads == expected, reason
    assert reason


def test_resolve_threads_keep_explicit_and_auto(restore_threads):
    torch.set_num_threads(4)
    cpu = torch.device("cpu")
    assert resolve_threads(CpuConfig(threads="keep"), workers=2, cpu_cores=4, device=cpu)[0] is None
    threads, reason = resolve_threads(CpuConfig(threads=3), workers=2, cpu_cores=4, device=cpu)
    assert threads == 3 and "config" in reason
    threads, reason = resolve_threads(CpuConfig(), workers=2, cpu_cores=4, device=cpu)
    assert threads == 2 and "was 4" in reason


def test_apply_threads(restore_threads):
    apply_threads(1)
    assert torch.get_num_threads() == 1
    apply_threads(None)
    assert torch.get_num_threads() == 1
    with pytest.raises(ValueError, match=">= 1"):
        apply_threads(0)


@pytest.mark.parametrize("load, threads, fires", [(49.0, 2, True), (10.0, 2, False), (49.0, 1, False),
                                                  (None, 2, False)])
def test_threads_contended_fires_when_others_leave_fewer_cores_than_torch_threads(load, threads, fires):
    """Half of 2 cores taken by others, 2 threads: use 1, about 1.7x by the estimate. Twins: a
    quiet machine, one thread already, no load measured."""
    import dataclasses

    from torchboost.techniques.cpu import TECHNIQUE, threads_contended

    example = next(rule.example for rule in TECHNIQUE.rules if rule.id == "threads.contended")
    facts = dataclasses.replace(example(), other_load_pct=load, cpu_threads=threads)
    finding = threads_contended(facts)
    assert (finding is not None) is fires
    if fires:
        assert finding.fix == {"cpu.threads": 1} and 1.5 < finding.expected_speedup < 2.0
        assert "49% of the machine" in finding.title
