"""torch's fp32 arithmetic switches in tests: put back after each test, and every write of the
older TF32 flags recorded. The switches are readable and settable without a GPU."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from torchboost import _fp32_precision

LEAVES = _fp32_precision.CUDA_SWITCHES + _fp32_precision.CPU_SWITCHES
HAS_NEW_API = _fp32_precision.has_switch("cuda.matmul")
_holder = _fp32_precision.holder  # the real one, whatever a test stands in for it


def _parents() -> dict[str, Any]:
    """The per-backend and global switches the leaves inherit from ("none" in each leaf)."""
    return {name: holder for name, holder in (("generic", torch.backends), ("cudnn", torch.backends.cudnn))
            if hasattr(holder, "fp32_precision")}


def _legacy_matmul() -> str:
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:  # an earlier test left the two APIs apart: torch's default then
        return "highest"


@pytest.fixture
def torch_switches():
    """Each test leaves torch's switches as it found them: the older matmul precision and
    cuDNN flag first (their setters write the new switches too), then the parents, then each leaf."""
    legacy = (_legacy_matmul(), torch.backends.cudnn.allow_tf32 if not HAS_NEW_API else True)
    parents = {name: holder.fp32_precision for name, holder in _parents().items()}
    leaves = {name: found.fp32_precision for name in LEAVES if (found := _holder(name)) is not None}
    yield
    torch.set_float32_matmul_precision(legacy[0])
    torch.backends.cudnn.allow_tf32 = legacy[1]
    for name, holder in _parents().items():
        holder.fp32_precision = parents[name]
    for name, value in leaves.items():
        _holder(name).fp32_precision = value


class _Recorded:
    """A descriptor standing in for cuDNN's ``allow_tf32`` that records each write."""

    def __init__(self, real: Any, writes: list[str]) -> None:
        self.real, self.writes = real, writes

    def __get__(self, obj: Any, kind: Any) -> Any:
        return self.real.__get__(obj, kind)

    def __set__(self, obj: Any, value: Any) -> None:
        self.writes.append(f"torch.backends.cudnn.allow_tf32 = {value}")
        self.real.__set__(obj, value)


@pytest.fixture
def legacy_writes(monkeypatch, torch_switches) -> list[str]:
    """Every write of the older TF32 flags during the test, in words (they still take effect)."""
    writes: list[str] = []
    set_precision = torch.set_float32_matmul_precision
    cublas = type(torch.backends.cuda.matmul)
    cublas_setattr = cublas.__setattr__

    def recorded_precision(value: str) -> None:
        writes.append(f'torch.set_float32_matmul_precision("{value}")')
        set_precision(value)

    def recorded_setattr(self: Any, name: str, value: Any) -> Any:
        if name == "allow_tf32":
            writes.append(f"torch.backends.cuda.matmul.allow_tf32 = {value}")
        return cublas_setattr(self, name, value)

    monkeypatch.setattr(torch, "set_float32_matmul_precision", recorded_precision)
    monkeypatch.setattr(cublas, "__setattr__", recorded_setattr)
    monkeypatch.setattr(type(torch.backends.cudnn), "allow_tf32",
                        _Recorded(type(torch.backends.cudnn).__dict__["allow_tf32"], writes))
    return writes


def read_both_apis() -> dict[str, object]:
    """Every switch as each API reads it; an older flag that raises reads as the error's type."""
    seen: dict[str, object] = {name: found.fp32_precision for name in LEAVES if (found := _holder(name)) is not None}
    for name, read in (("matmul_precision", torch.get_float32_matmul_precision),
                       ("cuda.matmul.allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32),
                       ("cudnn.allow_tf32", lambda: torch.backends.cudnn.allow_tf32)):
        try:
            seen[name] = read()
        except RuntimeError as exc:
            seen[name] = type(exc).__name__
    return seen


def script_used_the_new_api() -> None:
    """What a script written for PyTorch 2.9+ does: TF32 on through the per-library switch
    alone, after which torch's older matmul flags raise when read."""
    torch.backends.cuda.matmul.fp32_precision = "tf32"


class _OlderCublas:
    """cuBLAS's flags on a torch before 2.9: ``allow_tf32`` is the matmul precision below "highest"."""

    def __init__(self, flags: "OlderTorch") -> None:
        self._flags = flags

    @property
    def allow_tf32(self) -> bool:
        return self._flags.precision != "highest"

    @allow_tf32.setter
    def allow_tf32(self, value: bool) -> None:
        self._flags.precision = "high" if value else "highest"


class OlderTorch:
    """torch's TF32 flags as a torch before 2.9 has them, no per-library switch: stands in for
    ``torch.backends.cuda.matmul``, ``torch.backends.cudnn`` and the matmul precision."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.precision = "highest"
        self.cudnn = type("OlderCudnn", (), {"allow_tf32": True})()
        monkeypatch.setattr(torch.backends.cuda, "matmul", _OlderCublas(self))
        monkeypatch.setattr(torch.backends, "cudnn", self.cudnn)
        monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: self.precision)
        monkeypatch.setattr(torch, "set_float32_matmul_precision", lambda value: setattr(self, "precision", value))
        monkeypatch.setattr(torch.backends, "mkldnn", type("OlderMkldnn", (), {})())
