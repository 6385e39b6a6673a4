"""torch.compile with a safety net: keep the user's model object, fall back to eager on failure.

:func:`apply_compile` compiles a model's ``forward`` (``scope="model"``) or the ``forward``
of each repeated block (``scope="regional"``: the children of a ``ModuleList`` /
``Sequential`` that share a class, e.g. transformer layers; compiling one block's code
once and reusing it is much shorter than compiling the whole model). The compiled
function is installed as an instance attribute ``forward`` on the module it came from,
so the model object, its parameters and its ``state_dict()`` keys stay exactly the
user's, and hooks keep running.

A compile error surfaces at the first call (compilation is lazy). It is caught there:
that call and every later one run the original eager ``forward``, with one warning
giving the error's first line. A hit of dynamo's recompile limit is recorded once and
warned about once. :class:`CompileStats` is updated in place as calls happen.

Usable on its own::

    stats = apply_compile(model, mode="default", scope="regional")
    ... train ...
    print(stats.first_call_s, stats.fell_back, stats.recompile_limit_hit)
    remove_compile(model)                    # back to plain eager, e.g. before pickling
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from torchboost.env import Environment
from torchboost.techniques._model import InstanceForward, find_repeated_blocks, remove_forwards
from torchboost.techniques.compile.compile_settings import CompileConfig

__all__ = [
    "CompileConfig",
    "CompileStats",
    "CompileWarning",
    "apply_compile",
    "find_repeated_blocks",
    "remove_compile",
    "resolve_compile",
]


class CompileWarning(UserWarning):
    """torch.compile failed (the model runs eagerly) or hit its recompile limit."""


@dataclass
class CompileStats:
    """What compiling did; plain data, updated in place as the model is called."""

    mode: str = "off"
    """The torch.compile mode applied, "off" when nothing was compiled."""
    scope: str = "model"
    """The scope actually applied: "model" or "regional"."""
    scope_reason: str = ""
    """Why this scope (e.g. regional fell back to the whole model), in words."""
    regions: list[str] = field(default_factory=list)
    """Qualified names of the compiled modules ("" is the whole model)."""
    first_call_s: float | None = None
    """Wall time of the first (compiling) call, seconds, summed over regions; host time
    without a device sync, which compilation dominates. None until the first call."""
    fell_back: bool = False
    """Compilation failed and the model runs in eager mode for good."""
    error: str | None = None
    """First line of the compile error, when it fell back."""
    recompile_limit_hit: bool = False
    """Dynamo reached its recompile limit; the affected code then runs eagerly."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict."""
        return dataclasses.asdict(self)


def resolve_compile(config: CompileConfig, env: Environment) -> tuple[CompileConfig, str]:
    """The compile settings that can run in ``env``; returns ``(config, reason)``.

    ``mode`` becomes "off" when Inductor lacks what it needs here (no C++ compiler on
    CPU, no Triton on CUDA, no Metal backend on MPS), and "reduce-overhead" becomes "default" off CUDA because
    it means CUDA graphs.
    """
    if config.mode == "off":
        return config, "off as configured"
    if not env.can_compile:
        return dataclasses.replace(config, mode="off"), f"off: {env.compile_reason}"
    if config.mode == "reduce-overhead" and env.device != "cuda":
        return (
            dataclasses.replace(config, mode="default"),
            f"default: reduce-overhead means CUDA graphs, which {env.device} has not",
        )
    return config, f"{config.mode}, scope {config.scope}: {env.compile_reason}"


class _Shared:
    """State shared by the regions of one :func:`apply_compile` call."""

    def __init__(self, stats: CompileStats) -> None:
        self.stats = stats

    def fall_back(self, exc: BaseException) -> None:
        self.stats.fell_back = True
        self.stats.error = _first_line(exc)
        warnings.warn(
            f"torch.compile failed, so this model runs in eager mode from now on: "
            f"{self.stats.error}",
            CompileWarning,
            stacklevel=4,
        )

    def recompile_limit(self) -> None:
        if self.stats.recompile_limit_hit:
            return
        self.stats.recompile_limit_hit = True
        warnings.warn(
            "torch.compile hit its recompile limit; the code concerned now runs eagerly. "
            'Inputs that change shape or dtype cause recompiles; TORCH_LOGS="recompiles" '
            "shows why.",
            CompileWarning,
            stacklevel=2,
        )


# The region whose compiled forward is running, so the log filter below knows whose
# recompile limit dynamo reports.
_ACTIVE: contextvars.ContextVar[_Shared | None] = contextvars.ContextVar("_ACTIVE", default=None)
_DYNAMO_LOGGER = "torch._dynamo.convert_frame"


class _RecompileLimitFilter(logging.Filter):
    """Sees dynamo's "hit config.recompile_limit" warning; lets every record through."""

    def filter(self, record: logging.LogRecord) -> bool:
        shared = _ACTIVE.get()
        if shared is not None and record.levelno >= logging.WARNING:
            message = record.getMessage()
            if "hit config." in message and "recompile_limit" in message:
                shared.recompile_limit()
        return True


_FILTER = _RecompileLimitFilter()


def _compile_errors() -> tuple[type[BaseException], ...]:
    # Errors that mean "the compiler failed", as opposed to the user's own code raising.
    # Deferred: importing dynamo and inductor costs seconds, and only a compile failure needs them.
    from torch._dynamo.exc import TorchDynamoException
    from torch._inductor.exc import CppCompileError, InvalidCxxCompiler

    return (TorchDynamoException, CppCompileError, InvalidCxxCompiler)


def _first_line(exc: BaseException) -> str:
    # BackendCompilerFailed's own first line only says which backend raised.
    inner = getattr(exc, "inner_exception", None) or exc
    lines = str(inner).strip().splitlines()
    return f"{type(inner).__name__}: {lines[0] if lines else ''}".rstrip(": ")


class _CompiledForward(InstanceForward):
    """Instance ``forward`` of a compiled module: compiled call, eager after a failure.

    It compiles the class's *unbound* ``forward`` (:class:`InstanceForward`), so every
    block of one class shares one compiled code object.
    """

    def __init__(self, module: nn.Module, mode: str, backend: Any, shared: _Shared) -> None:
        super().__init__(module)
        if backend is None:
            inductor_mode = None if mode == "default" else mode
            self._compiled = torch.compile(self._func, mode=inductor_mode)
        else:  # a custom backend takes no Inductor mode
            self._compiled = torch.compile(self._func, backend=backend)
        self._shared = shared
        self._errors = _compile_errors()
        self._called = False

    def eager(self, *args: Any, **kwargs: Any) -> Any:
        """The module's original, uncompiled forward."""
        return self.plain(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        stats = self._shared.stats
        if stats.fell_back:
            return self.eager(*args, **kwargs)
        start = time.perf_counter()
        token = _ACTIVE.set(self._shared)
        try:
            out = self._compiled(self._module, *args, **kwargs)
        except self._errors as exc:
            # If eager raises too, the fault is the user's code, not the compiler's:
            # that error propagates and compiling stays on.
            out = self.eager(*args, **kwargs)
            self._shared.fall_back(exc)
            return out
        finally:
            _ACTIVE.reset(token)
        if not self._called:
            self._called = True
            stats.first_call_s = (stats.first_call_s or 0.0) + time.perf_counter() - start
        return out


def _install(module: nn.Module, mode: str, backend: Any, shared: _Shared) -> None:
    if _CompiledForward.installed_on(module):
        raise ValueError(
            f"{type(module).__name__} is already compiled by apply_compile; "
            "call remove_compile(model) first"
        )
    module.forward = _CompiledForward(module, mode, backend, shared)


def apply_compile(
    model: nn.Module, *, mode: str, scope: str, _backend: Any = None
) -> CompileStats:
    """Compile ``model`` in place (see the module docstring); returns its live stats.

    ``mode`` is one of :data:`CompileConfig.MODES` ("off" does nothing); ``scope`` is
    "model" or "regional" (falls back to "model" when there is no repeated block).
    ``_backend`` replaces Inductor (tests use it to force a failure cheaply).
    """
    if mode not in CompileConfig.MODES:
        modes = ", ".join(CompileConfig.MODES)
        raise ValueError(f"compile.mode: expected one of {modes}; got {mode!r}")
    if scope not in CompileConfig.SCOPES:
        scopes = ", ".join(CompileConfig.SCOPES)
        raise ValueError(f"compile.scope: expected one of {scopes}; got {scope!r}")
    stats = CompileStats(mode=mode, scope=scope)
    if mode == "off":
        stats.scope_reason = "compile is off"
        return stats
    targets = find_repeated_blocks(model) if scope == "regional" else []
    if targets:
        stats.scope_reason = f"{len(targets)} repeated blocks of {type(targets[0][1]).__name__}"
    else:
        stats.scope = "model"
        stats.scope_reason = (
            "no repeated block, so the whole model" if scope == "regional" else "the whole model"
        )
        targets = [("", model)]
    logger = logging.getLogger(_DYNAMO_LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    shared = _Shared(stats)
    for name, module in targets:
        _install(module, mode, _backend, shared)
        stats.regions.append(name)
    return stats


def remove_compile(model: nn.Module) -> int:
    """Undo :func:`apply_compile` on ``model`` and its submodules; returns how many
    forwards went back to eager."""
    return remove_forwards(model, _CompiledForward)
