"""The one module that patches PyTorch to observe a training loop, and restores it.

What is touched, and why each is the least invasive way to see that phase:

* ``torch.utils.data.DataLoader.__iter__`` - learn which loader feeds the loop and its
  settings (once per epoch);
* ``torch.utils.data.dataloader._BaseDataLoaderIter.__next__`` - time spent waiting
  for each batch (both single- and multi-process iterators inherit it); these two are
  patched through :mod:`torchboost.reach.loader_patch`, the one module that patches
  the DataLoader;
* ``torch.autograd.backward`` - backward time and the loss (``Tensor.backward`` calls
  it through the module attribute, so one patch covers both spellings);
* global module forward pre/post hooks (public API) - forward time of outermost calls
  and whether autocast was on. Global hooks send every submodule call through
  PyTorch's slower hook path, so once warm-up ends they are swapped for hooks on the
  root modules seen (the model, a loss module); not when ``torch.compile`` has run,
  since changing hooks would invalidate its guards and recompile;
* global optimizer step pre/post hooks (public API) - optimizer time and step
  boundaries. A closure passed to ``step`` (Lightning always passes one; LBFGS needs
  one) is wrapped by the pre-hook so its time is taken out of the optimizer's: the
  forward and backward inside it count as forward and backward, the rest of it as
  other;
* ``torch.save``, ``print``, logging handlers, ``sys.stdout`` and ``sys.stderr`` - the
  host's calls outside those phases, checkpoint writes and output, timed by
  :class:`~torchboost.observe.hooks.host_calls.HostCalls` (its module says what and how).

Hooks only read ``time.perf_counter`` and add to the recorder; they never synchronise
the device. Inside code being compiled by ``torch.compile`` they do nothing, so they do
not break graphs. A filter torchboost attaches to a library's logger while recording
(compile's on dynamo's) is removed on ``uninstall``
(:class:`~torchboost.reach.log_filters.LoggerFilters`).
"""

from __future__ import annotations

import functools
import sys
import time
import warnings
from typing import Any, Callable

import torch
import torch.optim.optimizer as _optim
from torch.nn.modules import module as _nn_module

from torchboost.reach.loader_patch import ITERATION_ATTRIBUTES, LoaderPatch, timed_iteration
from torchboost.reach.log_filters import LoggerFilters
from torchboost.observe.hooks.host_calls import HOST_ATTRIBUTES, HostCalls
from torchboost.observe.record.phases import BACKWARD, FORWARD, OPTIMIZER
from torchboost.observe.record.recorder import StepRecorder

__all__ = ["Instrumentation", "PATCHED_ATTRIBUTES"]

PATCHED_ATTRIBUTES: tuple[tuple[Any, str], ...] = (*ITERATION_ATTRIBUTES, (torch.autograd, "backward"),
                                                   (torch.jit, "script"), *HOST_ATTRIBUTES)
"""(owner, attribute) pairs replaced while installed and restored by ``uninstall``."""

_COMPILE_HOOK_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks"


class Instrumentation:
    """Installs the observer's patches and hooks feeding ``recorder``; ``uninstall`` undoes all.

    Use as a context manager, or ``install()`` / ``uninstall()``. Installing twice in
    one process is refused, since the second would wrap the first's wrappers.
    """

    _active: "Instrumentation | None" = None

    def __init__(self, recorder: StepRecorder, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self.recorder = recorder
        self._clock = clock
        self._backward: Any = None  # torch.autograd.backward as it was before install
        self._script: Any = None  # torch.jit.script as it was before install
        self._roots: list[torch.nn.Module] = []  # the modules our own forward hooks are on
        self._loader_patch: LoaderPatch | None = None
        self._host = HostCalls(recorder, clock=clock)
        self._log_filters = LoggerFilters()
        self._handles: list[Any] = []
        self._narrowed = False
        self._warning_filter: Any = None
        self._fwd_depth = 0
        self._fwd_t0 = 0.0
        self._bwd_depth = 0
        self._opt_depth = 0
        self._opt_t0 = 0.0
        self._closure_ms = 0.0  # time inside the closure of the optimizer step in flight
        # is_built, not is_available: the latter initialises CUDA before the script could
        # set CUDA_VISIBLE_DEVICES.
        self._autocast_devices = ("cpu", "cuda") if torch.backends.cuda.is_built() else ("cpu",)

    @property
    def installed(self) -> bool:
        """True between ``install()`` and ``uninstall()``."""
        return Instrumentation._active is self

    def install(self) -> "Instrumentation":
        """Patch and register hooks; raises RuntimeError if an instrumentation is already active."""
        if Instrumentation._active is not None:
            raise RuntimeError("torchboost instrumentation is already installed in this process")
        Instrumentation._active = self
        self._log_filters.start()
        self._loader_patch = timed_iteration(self.recorder, self._clock).install()
        self._backward = torch.autograd.backward
        torch.autograd.backward = self._wrap_backward(self._backward)
        self._script = torch.jit.script
        torch.jit.script = self._wrap_script(self._script)
        self._host.install()
        self._narrowed = False
        self._handles = [  # the two global forward hooks first: _narrow_to_roots swaps them
            _nn_module.register_module_forward_pre_hook(self._forward_pre),
            _nn_module.register_module_forward_hook(self._forward_post, always_call=True),
            _optim.register_optimizer_step_pre_hook(self._optimizer_pre),
            _optim.register_optimizer_step_post_hook(self._optimizer_post),
        ]
        self.recorder.on_warmup_end.append(self._narrow_to_roots)
        # Our global hooks make torch.compile(module) warn that hooks fire once more for
        # the wrapper; the depth count already handles that, so the warning is only noise
        # in the user's terminal. The filter is ours alone and leaves with uninstall.
        warnings.filterwarnings("ignore", message=_COMPILE_HOOK_WARNING)
        self._warning_filter = warnings.filters[0]
        return self

    def uninstall(self) -> None:
        """Restore every patched attribute and remove the hooks; safe to call twice."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._host.uninstall()
        if self._backward is not None:
            torch.autograd.backward = self._backward
            self._backward = None
        if self._script is not None:
            torch.jit.script = self._script
            self._script = None
        self._roots = []
        if self._loader_patch is not None:
            self._loader_patch.uninstall()
            self._loader_patch = None
        self._log_filters.release()
        if self._warning_filter in warnings.filters:
            warnings.filters.remove(self._warning_filter)
            # Let cached "ignore" decisions go, as warnings.filterwarnings itself does.
            getattr(warnings, "_filters_mutated", lambda: None)()
        self._warning_filter = None
        if Instrumentation._active is self:
            Instrumentation._active = None

    def __enter__(self) -> "Instrumentation":
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def _narrow_to_roots(self, roots: list[torch.nn.Module]) -> None:
        if not self.installed or self._narrowed or not roots or _compile_has_run(roots):
            return
        self._narrowed = True
        global_hooks, self._handles = self._handles[:2], self._handles[2:]
        for handle in global_hooks:
            handle.remove()
        self._roots = list(roots)
        self._hook_roots()

    def _hook_roots(self) -> None:
        for module in self._roots:
            self._handles.append(module.register_forward_pre_hook(self._forward_pre))
            self._handles.append(module.register_forward_hook(self._forward_post, always_call=True))

    def _wrap_script(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``torch.jit.script`` of a module our hooks are on: TorchScript compiles a module's
        hooks with it, and ours are not TorchScript, so they are off while it scripts (the
        scripted module is the script's own new object, outside observation)."""
        @functools.wraps(original)
        def script(obj: Any, *args: Any, **kwargs: Any) -> Any:
            if not (isinstance(obj, torch.nn.Module) and self._roots and self.installed):
                return original(obj, *args, **kwargs)
            ours = {id(h) for h in self._handles[-2 * len(self._roots):]}
            for handle in self._handles[-2 * len(self._roots):]:
                handle.remove()
            self._handles = [h for h in self._handles if id(h) not in ours]
            try:
                return original(obj, *args, **kwargs)
            finally:
                self._hook_roots()

        return script

    # -- wrappers --------------------------------------------------------------------------
    def _wrap_backward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        recorder, clock = self.recorder, self._clock

        @functools.wraps(original)
        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if self._bwd_depth:  # backward from inside a backward hook: part of the outer one
                return original(tensors, *args, **kwargs)
            self._bwd_depth = 1
            recorder.current = BACKWARD
            recorder.backward_tensor(tensors)
            recorder.phase_begin(BACKWARD)
            start = clock()
            try:
                result = original(tensors, *args, **kwargs)
            finally:
                self._bwd_depth = 0
                recorder.current = None
                recorder.phase_end(BACKWARD, (clock() - start) * 1000.0)
            recorder.backward_done()  # may end the run with StopObserving
            return result

        return backward

    # -- hooks -------------------------------------------------------------------------------
    def _forward_pre(self, module: torch.nn.Module, args: Any) -> None:
        if torch.compiler.is_compiling():  # traced by dynamo: fold the hook away
            return
        if self._fwd_depth:
            self._fwd_depth += 1
            return
        self._fwd_depth = 1
        self.recorder.current = FORWARD
        self.recorder.forward_begin(module, self._autocast_devices)
        self._fwd_t0 = self._clock()

    def _forward_post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if torch.compiler.is_compiling():
            return
        depth = self._fwd_depth
        if depth > 1:
            self._fwd_depth = depth - 1
        elif depth == 1:
            self._fwd_depth = 0
            self.recorder.current = None
            self.recorder.phase_end(FORWARD, (self._clock() - self._fwd_t0) * 1000.0)

    def _optimizer_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> Any:
        if self._opt_depth:
            self._opt_depth += 1
            return None
        self._opt_depth = 1
        self._closure_ms = 0.0
        self.recorder.current = OPTIMIZER
        self.recorder.optimizer_begin(optimizer)
        self._opt_t0 = self._clock()
        if len(args) > 1 and callable(args[1]):  # args[0] is the optimizer itself
            return (args[0], self._timed_closure(args[1]), *args[2:]), kwargs
        if callable(kwargs.get("closure")):
            return args, {**kwargs, "closure": self._timed_closure(kwargs["closure"])}
        return None

    def _timed_closure(self, closure: Callable[[], Any]) -> Callable[[], Any]:
        # Runs the closure as given, and notes how long it took: that time is the
        # forward, backward and whatever else the closure does, not the optimizer's.
        @functools.wraps(closure)
        def timed() -> Any:
            self.recorder.closure_begin()
            self.recorder.current = None  # the closure is outside the optimizer's phase (a print there is output)
            start = self._clock()
            try:
                return closure()
            finally:
                self._closure_ms += (self._clock() - start) * 1000.0
                self.recorder.current = OPTIMIZER
                self.recorder.closure_end()

        return timed

    def _optimizer_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        depth = self._opt_depth
        if depth > 1:
            self._opt_depth = depth - 1
        elif depth == 1:
            self._opt_depth = 0
            self.recorder.current = None
            elapsed = (self._clock() - self._opt_t0) * 1000.0
            self.recorder.phase_end(OPTIMIZER, max(0.0, elapsed - self._closure_ms))
            self.recorder.optimizer_done(optimizer)  # may end the run with StopObserving


def _compile_has_run(roots: list[torch.nn.Module]) -> bool:
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", {})
    if counters.get("frames", {}).get("total", 0):
        return True
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    optimized = getattr(eval_frame, "OptimizedModule", ())
    return any(isinstance(m, optimized) for m in roots) if optimized else False
