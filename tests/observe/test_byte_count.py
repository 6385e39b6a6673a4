"""The bytes an op reads and writes, counted by a dispatch mode, against sizes worked out by hand."""

from __future__ import annotations

import torch

from torchboost.observe.probes.byte_count import ByteCounterMode, tensor_bytes

FP32 = 4


class _OutputsOnly(ByteCounterMode):
    """The broken twin: counts what an op writes and not what it reads."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not getattr(func, "is_view", False):
            self.by_op[str(func.overloadpacket)] += tensor_bytes(out)
        return out


def _mm_bytes(mode_type: type[ByteCounterMode]) -> int:
    a, w = torch.randn(256, 1024), torch.randn(1024, 1024)
    with mode_type() as mode:
        a @ w
    return mode.by_op["aten.mm"]


def test_a_matmul_reads_both_inputs_and_writes_its_output_and_the_twin_misses_the_reads():
    exact = (256 * 1024 + 1024 * 1024 + 256 * 1024) * FP32
    assert _mm_bytes(ByteCounterMode) == exact
    assert _mm_bytes(_OutputsOnly) != exact


def test_an_in_place_add_reads_two_tensors_and_writes_one_and_a_view_moves_nothing():
    a, b = torch.zeros(1000), torch.ones(1000)
    with ByteCounterMode() as mode:
        a.add_(b)
        a.view(10, 100).t()
        torch.ops.aten._unsafe_view(a, [10, 100])  # an alias the schema does not call a view
        a.copy_(b)  # writes a: counted
    assert mode.by_op["aten.add_"] == 3 * 1000 * FP32
    assert mode.by_op["aten.copy_"] == 2 * 1000 * FP32 + 1000 * FP32
    assert "aten.view" not in mode.by_op and "aten.t" not in mode.by_op and "aten._unsafe_view" not in mode.by_op


def test_the_backward_of_a_linear_layer_is_counted_too():
    layer = torch.nn.Linear(64, 32, bias=False)
    x = torch.randn(16, 64)
    with ByteCounterMode() as mode:
        layer(x).sum().backward()
    # forward x @ W.t and the weight gradient grad.t @ x: two matmuls of the same three sizes
    one = (16 * 64 + 32 * 64 + 16 * 32) * FP32
    assert mode.by_op["aten.mm"] == 2 * one
