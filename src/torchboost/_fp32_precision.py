"""torch's switches for the arithmetic inside fp32 matmuls and convolutions, in one place.

TF32 on a CUDA GPU (cuBLAS matmuls, cuDNN convolutions and RNNs) and bf16 math in oneDNN on
a CPU are the same family of switches. PyTorch 2.9 gave each library a switch of its own,
``fp32_precision`` ("ieee", "tf32", "bf16", or "none": inherit from the backend's and the
global switch)::

    torch.backends.cuda.matmul.fp32_precision     cuBLAS
    torch.backends.cudnn.conv.fp32_precision      cuDNN convolutions ("tf32" by default)
    torch.backends.cudnn.rnn.fp32_precision       cuDNN RNNs ("tf32" by default)
    torch.backends.mkldnn.matmul.fp32_precision   oneDNN (and .conv)

It keeps the older flags beside them (``torch.backends.cuda.matmul.allow_tf32``,
``torch.backends.cudnn.allow_tf32``, ``torch.set_float32_matmul_precision``), and reading an
older flag raises once the new switches say something it cannot (the matmul switch set to
"tf32" alone, cuDNN's conv and RNN switches set apart): "you have used mix of the legacy
and new APIs". torch's own compiler still reads the older flags (Inductor's autotune cache
and kernel choice, 2.9 to at least 2.13: pytorch issues 166387, 189955), so TF32 set through
the matmul switch alone makes ``torch.compile`` on a GPU raise. So torchboost writes the
per-library switches where torch has them, the older flags only on a torch without them,
and where a write leaves a state torch's older readers refuse, cuBLAS's older flag too,
which says the same thing (asked of torch after the write, not of a version table);
:class:`Saved` puts back the values it read.

Every reader and writer of these switches in torchboost goes through this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

__all__ = ["CUDA_SWITCHES", "CPU_SWITCHES", "Saved", "Tf32State", "has_switch", "holder", "legacy_matmul_precision",
           "older_readers_refuse", "read_switches", "set_switches", "set_tf32", "spelling", "tf32_state"]

CUDA_SWITCHES = ("cuda.matmul", "cudnn.conv", "cudnn.rnn")
"""The switches TF32 turns on for a CUDA run: cuBLAS, cuDNN's convolutions and its RNNs
(the two cuDNN ones together, as ``cudnn.allow_tf32`` sets them: apart, torch's own
readers of the older cuDNN flag raise)."""
CPU_SWITCHES = ("mkldnn.matmul", "mkldnn.conv")
"""oneDNN's switches for fp32 matmuls and convolutions on a CPU."""

_LEGACY_MATMUL = "matmul_precision"
_LEGACY_CUDNN = "cudnn_allow_tf32"


def holder(name: str) -> Any | None:
    """The object whose ``fp32_precision`` is switch ``name`` ("cuda.matmul"), None where
    this torch has no such switch."""
    backend, _, op = name.partition(".")
    try:
        found = getattr(getattr(torch.backends, backend, None), op, None)
        if found is None:
            return None
        getattr(found, "fp32_precision")  # an older torch's cuBLAS holder raises AttributeError
        return found
    except (AttributeError, RuntimeError):
        return None


def has_switch(name: str) -> bool:
    """Whether this torch has the per-library switch ``name`` ("cuda.matmul")."""
    return holder(name) is not None


def read_switches(names: tuple[str, ...]) -> dict[str, str]:
    """The value of each switch of ``names`` this torch has, by name (never raises)."""
    return {name: str(found.fp32_precision) for name in names if (found := holder(name)) is not None}


@dataclass(frozen=True)
class Saved:
    """Switches as they were before a write; :meth:`restore` puts exactly those back."""

    switches: tuple[tuple[str, str], ...] = ()
    """(name, value) of each per-library switch written, as read before."""
    legacy: tuple[tuple[str, Any], ...] = ()
    """The older flags written, as read before: ("matmul_precision", "highest") and
    ("cudnn_allow_tf32", True) on a torch without the per-library switches; the matmul
    precision alone where a write of the switches had to be told to the older readers too."""

    def restore(self) -> None:
        """Put every switch written back to its value before: the older flags first (their
        setters write the per-library switches too), then the switches, the last write first.
        A state the older readers refused before (the script set the matmul switch alone) is
        not put back: the older flags are left saying what the switches say."""
        for name, value in reversed(self.legacy):
            if name == _LEGACY_MATMUL:
                torch.set_float32_matmul_precision(value)
            else:
                torch.backends.cudnn.allow_tf32 = value
        for name, value in reversed(self.switches):
            found = holder(name)
            if found is not None:
                found.fp32_precision = value


def _legacy_write(values: Mapping[str, str]) -> tuple[tuple[str, Any], ...]:
    # A torch before the per-library switches: cuBLAS follows the matmul precision, cuDNN
    # has one flag for convolutions and RNNs alike.
    saved: list[tuple[str, Any]] = []
    if "cuda.matmul" in values:
        saved.append((_LEGACY_MATMUL, torch.get_float32_matmul_precision()))
        torch.backends.cuda.matmul.allow_tf32 = values["cuda.matmul"] == "tf32"
    cudnn = values.get("cudnn.conv", values.get("cudnn.rnn"))
    if cudnn is not None:
        saved.append((_LEGACY_CUDNN, bool(torch.backends.cudnn.allow_tf32)))
        torch.backends.cudnn.allow_tf32 = cudnn == "tf32"
    return tuple(saved)


def set_switches(values: Mapping[str, str], *, for_compile: bool = True) -> Saved:
    """Set each switch of ``values`` ({"cuda.matmul": "tf32"}) and return what was there.

    Through the per-library switches where torch has them; only where it has none of
    CUDA's, through the older flags (a value of "tf32" allows TF32, any other forbids it).
    A switch this torch has no way to set (oneDNN's before 2.9) is left alone.
    ``for_compile``: where the matmul switch alone leaves a state torch's older readers
    refuse (:func:`older_readers_refuse`), tell cuBLAS's older flag too, as torch.compile
    reads it; False for a write no compile sees (a timed matmul), put back exactly.
    """
    saved: list[tuple[str, str]] = []
    matmul_before = legacy_matmul_precision()
    for name, value in values.items():
        found = holder(name)
        if found is not None:
            saved.append((name, str(found.fp32_precision)))
            found.fp32_precision = value
    cuda = {name: value for name, value in values.items() if name in CUDA_SWITCHES}
    if cuda and not any(has_switch(name) for name in CUDA_SWITCHES):
        return Saved(tuple(saved), _legacy_write(cuda))
    if for_compile and "cuda.matmul" in cuda and has_switch("cuda.matmul") and older_readers_refuse():
        return _also_told(tuple(saved), matmul_before, cuda["cuda.matmul"])
    return Saved(tuple(saved))


def legacy_matmul_precision() -> str | None:
    """``torch.get_float32_matmul_precision()``, None where torch refuses to read it (the
    per-library switches say something it cannot)."""
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        return None


def older_readers_refuse() -> bool:
    """Whether torch's older readers of cuBLAS's TF32 state raise on the switches as they are
    ("mix of the legacy and new APIs"): Inductor reads them when it compiles for a GPU."""
    try:
        torch.get_float32_matmul_precision()
        torch.backends.cuda.matmul.allow_tf32
    except RuntimeError:
        return True
    return False


def _also_told(saved: tuple[tuple[str, str], ...], matmul_before: str | None, value: str) -> Saved:
    # cuBLAS's older flag writes the older matmul precision and the matmul switch together,
    # so both APIs say the same. Putting the precision back writes oneDNN's matmul switch
    # too: it is kept, to be put back after.
    torch.backends.cuda.matmul.allow_tf32 = value == "tf32"
    if matmul_before is None:
        return Saved(saved)
    kept = tuple((name, found) for name, found in read_switches(("mkldnn.matmul",)).items()
                 if name not in dict(saved))
    return Saved(kept + saved, ((_LEGACY_MATMUL, matmul_before),))


def set_tf32(on: bool = True, *, matmul: bool = True, cudnn: bool = True, for_compile: bool = True) -> Saved:
    """Allow TF32 (``on``) or forbid it ("ieee") in CUDA's fp32 matmuls (``matmul``) and
    cuDNN's convolutions and RNNs (``cudnn``); returns what was there. ``for_compile``: as
    :func:`set_switches` has it."""
    names = (("cuda.matmul",) if matmul else ()) + (("cudnn.conv", "cudnn.rnn") if cudnn else ())
    return set_switches({name: "tf32" if on else "ieee" for name in names}, for_compile=for_compile)


@dataclass(frozen=True)
class Tf32State:
    """What TF32 is allowed for in CUDA's fp32 arithmetic, as torch's switches say."""

    matmul: bool
    """cuBLAS may run fp32 matmuls in TF32."""
    cudnn: bool
    """cuDNN may run fp32 convolutions in TF32 (torch's default: True)."""
    api: str
    """Where it was read: "fp32_precision" (the per-library switches) or "allow_tf32" (the
    older flags, on a torch before 2.9)."""


def tf32_state() -> Tf32State:
    """TF32's state for matmuls and convolutions, read without raising whatever API the
    script used (readable on a machine without a GPU too)."""
    found = read_switches(("cuda.matmul", "cudnn.conv"))
    if found:
        return Tf32State(matmul=found.get("cuda.matmul") == "tf32", cudnn=found.get("cudnn.conv") == "tf32",
                         api="fp32_precision")
    return Tf32State(matmul=torch.get_float32_matmul_precision() != "highest",
                     cudnn=bool(torch.backends.cudnn.allow_tf32), api="allow_tf32")


_LEGACY_SPELLING = {"cuda.matmul": "torch.backends.cuda.matmul.allow_tf32 = {flag}",
                    "cudnn.conv": "torch.backends.cudnn.allow_tf32 = {flag}"}


def spelling(values: Mapping[str, str]) -> tuple[str, ...]:
    """The plain-PyTorch lines that set ``values`` on this torch: the per-library switches
    where it has them, else the older flags (TF32 or not). TF32 in cuBLAS is spelled with the
    older flag on every torch: it sets the matmul switch too, and the switch alone makes
    ``torch.compile`` raise on a GPU (see the module's docstring)."""
    lines = []
    for name, value in values.items():
        if name == "cuda.matmul" and value == "tf32":
            lines.append(_LEGACY_SPELLING[name].format(flag=True))
        elif has_switch(name):
            lines.append(f'torch.backends.{name}.fp32_precision = "{value}"')
        elif name in _LEGACY_SPELLING:
            lines.append(_LEGACY_SPELLING[name].format(flag=value == "tf32"))
    return tuple(dict.fromkeys(lines))
