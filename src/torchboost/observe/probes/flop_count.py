"""The FLOPs of one training step, forward and backward, counted by torch's own counter.

``torch.utils.flop_counter.FlopCounterMode`` is entered at one step boundary and left at
the next, so it sees the whole step: forward, backward, optimizer. The step counted is
the profiler's warm-up step (see :class:`~torchboost.observe.record.stages.RunStages`): its time
is neither recorded nor profiled, so the counter's own cost (every op goes through a
Python dispatch mode) is in no figure. A failure is kept in :attr:`StepFlops.error` and
the script's run goes on.

The counter knows the ops that carry a model's arithmetic (matmuls, convolutions,
attention); elementwise ops count nothing, which is how MFU is defined. Its attention
formulas cover the CUDA kernels; the CPU's flash attention (what
``F.scaled_dot_product_attention`` runs on a CPU) is given the same formulas here
(:func:`cpu_attention_formulas`), else a CPU transformer's attention would count nothing. A compiled
region's kernels are not aten ops and are not counted: :attr:`StepFlops.note` says so.
The same step's bytes per op (:mod:`torchboost.observe.probes.byte_count`) are counted with them,
for the roofline of the hottest operators, and its random ops are named
(:mod:`torchboost.observe.probes.random_draws`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["StepFlops", "TOP_BYTE_OPS", "TOP_FLOP_OPS", "cpu_attention_formulas"]

TOP_FLOP_OPS = 8
"""Ops kept in ``flops_by_op``, by FLOPs."""
TOP_BYTE_OPS = 32
"""Ops kept in ``bytes_by_op``, by bytes."""


def cpu_attention_formulas() -> dict[Any, Any]:
    """FLOP formulas for the CPU flash attention and its backward, torch's own for SDPA:
    4·b·h·s_q·s_k·d forward (two matmuls), 2.5 times that backward. Causal masks count in
    full, as torch counts its CUDA kernels. Empty when this torch has no such op."""
    import torch
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    aten = torch.ops.aten
    if not hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward"):
        return {}

    def forward(query: Any, key: Any, value: Any, *_: Any, out_shape: Any = None, **__: Any) -> int:
        return sdpa_flop_count(query, key, value)

    def backward(grad: Any, query: Any, key: Any, value: Any, *_: Any, out_shape: Any = None, **__: Any) -> int:
        return sdpa_backward_flop_count(grad, query, key, value)

    return {aten._scaled_dot_product_flash_attention_for_cpu: forward,
            aten._scaled_dot_product_flash_attention_for_cpu_backward: backward}


class StepFlops:
    """Counts one step's FLOPs: :meth:`start` at a boundary, :meth:`stop` at the next."""

    def __init__(self) -> None:
        self.flops: int | None = None
        """FLOPs of the counted step; None until one was counted."""
        self.by_op: dict[str, int] = {}
        """FLOPs per aten op of that step (the largest :data:`TOP_FLOP_OPS`)."""
        self.bytes_by_op: dict[str, int] = {}
        """Bytes read and written per aten op of that step (the largest :data:`TOP_BYTE_OPS`)."""
        self.random_ops: list[str] = []
        """The step's ops that draw random numbers ("aten.native_dropout"), sorted."""
        self.error: str | None = None
        """Why the count failed, when it did."""
        self._mode: Any = None
        self._bytes: Any = None
        self._random: Any = None

    @property
    def counting(self) -> bool:
        """A step is being counted now."""
        return self._mode is not None

    def start(self) -> None:
        """Count from this boundary on (once per run: a second call does nothing)."""
        if self._mode is not None or self.flops is not None or self.error is not None:
            return
        try:
            from torch.utils.flop_counter import FlopCounterMode  # imported only when a step is counted

            from torchboost.observe.probes.byte_count import ByteCounterMode
            from torchboost.observe.probes.random_draws import RandomDraws

            mode = FlopCounterMode(display=False, custom_mapping=cpu_attention_formulas())
            mode.__enter__()
            self._mode = mode
            self._bytes = ByteCounterMode().__enter__()
            self._random = RandomDraws().__enter__()
        except Exception as exc:  # noqa: BLE001 - the user's run must go on
            self.error = f"FlopCounterMode could not start: {type(exc).__name__}: {exc}"

    def stop(self, keep: bool = True) -> None:
        """Stop counting at this boundary; ``keep`` False drops the count (a step cut in two)."""
        mode, self._mode = self._mode, None
        byte_mode, self._bytes = self._bytes, None
        random_mode, self._random = self._random, None
        if mode is None:
            return
        try:
            for inner in (random_mode, byte_mode):  # the innermost first: the modes nest
                if inner is not None:
                    inner.__exit__(None, None, None)
            mode.__exit__(None, None, None)
            if keep and random_mode is not None:
                self.random_ops = sorted(random_mode.ops)
            if keep and byte_mode is not None:
                self.bytes_by_op = dict(byte_mode.by_op.most_common(TOP_BYTE_OPS))
            if keep:
                counts = mode.get_flop_counts().get("Global", {})
                self.by_op = dict(sorted(((str(op), int(n)) for op, n in counts.items()),
                                         key=lambda item: -item[1])[:TOP_FLOP_OPS])
                self.flops = int(mode.get_total_flops())
        except Exception as exc:  # noqa: BLE001
            self.error = f"FlopCounterMode failed: {type(exc).__name__}: {exc}"

    @property
    def note(self) -> str | None:
        """What a reader of a zero count must know; None otherwise."""
        if self.flops == 0:
            return ("no FLOPs counted: the step's arithmetic ran outside aten's matmul and convolution ops "
                    "(a torch.compile'd model's fused kernels are not counted)")
        return None
