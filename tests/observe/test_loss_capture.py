"""The loss capture keeps each step's own loss, even where the loss tensor is overwritten later.

Under CUDA graphs (``torch.compile(mode="reduce-overhead")``) a loss the compiled model
returns lives in the graph's static output buffer, which the next replay writes in place:
a kept alias (``detach()``) would read the last step's loss for every step. On a CPU the
replay is an in-place write to the same tensor; on a GPU, a real compiled model.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchboost.observe.record.loss_capture import LossCapture
from torchboost.observe.record.phases import RECORDED, WARMUP


class _AliasCapture(LossCapture):
    """The broken twin: keeps ``tensor.detach()``, an alias of the tensor backward ran on."""

    def backward_on(self, tensor):
        self._pending = tensor.detach()


def _replayed(capture: LossCapture, values: list[float]) -> LossCapture:
    """Each step's loss written into one buffer, in place, as a CUDA graph's replay does."""
    buffer = torch.zeros(())
    for index, value in enumerate(values):
        buffer.fill_(value)  # the replay of step ``index``
        capture.backward_on(buffer)
        capture.close_step(WARMUP if index == 0 else RECORDED, index)
    return capture


def test_each_kept_loss_is_its_step_s_own_after_the_buffer_is_overwritten():
    capture = _replayed(LossCapture(), [2.5, 2.0, 1.5])
    assert capture.warmup_values() == [2.5]
    assert capture.values() == [2.0, 1.5]
    assert float(capture.last) == 1.5 and capture.steps == [0, 1, 2]


def test_the_twin_an_alias_reads_the_last_replay_for_every_step():
    capture = _replayed(_AliasCapture(), [2.5, 2.0, 1.5])
    assert capture.warmup_values() == [1.5]
    assert capture.values() == [1.5, 1.5]


def test_a_kept_loss_is_not_the_tensor_backward_ran_on():
    capture, loss = LossCapture(), torch.tensor(3.0)
    capture.backward_on(loss)
    capture.close_step(RECORDED, 0)
    assert capture.last is not loss and capture.last.data_ptr() != loss.data_ptr()


def test_under_a_grad_scaler_the_loss_is_the_script_s_own_unscaled():
    class Scaler:
        _scale = torch.tensor(4.0)

    capture, scaled = LossCapture(), torch.tensor(8.0)
    capture.scaler = Scaler()
    capture.backward_on(scaled)
    capture.close_step(RECORDED, 0)
    scaled.fill_(100.0)
    assert capture.values() == [2.0]


@pytest.mark.gpu
def test_losses_kept_under_cuda_graphs_are_each_step_s_own():
    # The loss is the compiled graph's output: reduce-overhead replays it from a CUDA graph.
    class WithLoss(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(16, 1)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return nn.functional.mse_loss(self.layer(x), y)

    from torch._dynamo.utils import counters

    skips = counters["inductor"]["cudagraph_skips"]
    torch.manual_seed(0)
    model = WithLoss().cuda()
    compiled = torch.compile(model, mode="reduce-overhead")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    capture, by_hand = LossCapture(), []
    for step in range(6):
        x, y = torch.randn(32, 16, device="cuda"), torch.randn(32, 1, device="cuda")
        loss = compiled(x, y)
        capture.backward_on(loss)  # as the observer's backward hook sees it
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        capture.close_step(WARMUP if step < 2 else RECORDED, step)
        by_hand.append(float(loss.detach()))  # read before the next replay: this step's own
    assert counters["inductor"]["cudagraph_skips"] == skips  # the steps ran from a CUDA graph
    assert capture.warmup_values() + capture.values() == by_hand
    assert len(set(by_hand)) == len(by_hand)  # each step's loss differs: the check can tell them apart
