"""The prepared optimizer and scheduler that ``Booster.prepare`` hands back.

They are thin proxies: the user keeps calling ``optimizer.step()`` and
``scheduler.step()`` as in plain PyTorch; the optimizer's calls go to the training step
(:mod:`torchboost.step`: the accumulation window, unscale, skip on overflow, scale
update), and the scheduler keeps in step with the optimizer steps that really happened.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

from torchboost.step import TrainStep

__all__ = ["BoostedOptimizer", "BoostedScheduler"]

# LRScheduler warns when its step() precedes the optimizer's; BoostedScheduler only steps
# after a real optimizer step, so those warnings are false alarms caused by proxying.
_ORDER_WARNINGS = (
    r".*`optimizer\.step\(\)` has been overridden.*",
    r".*`lr_scheduler\.step\(\)` before `optimizer\.step\(\)`.*",
)


class BoostedOptimizer(torch.optim.Optimizer):
    """Wraps an optimizer: ``step()`` and ``zero_grad()`` go through the training step
    (:class:`torchboost.step.TrainStep`): accumulation's window and the precision's scaler.

    Under gradient accumulation ``step()`` and ``zero_grad()`` only act at a window's end.

    It subclasses ``torch.optim.Optimizer`` so that LR schedulers and ``isinstance``
    checks accept it, but it owns no parameters: ``param_groups``, ``state`` and
    ``defaults`` are the wrapped optimizer's own objects (``.optimizer``).
    """

    # Optimizer.__init__ is deliberately not called: it would register parameters a
    # second time. Every attribute below delegates to the wrapped optimizer.
    def __init__(self, optimizer: torch.optim.Optimizer, train_step: TrainStep):
        """``train_step`` steps and zeroes ``optimizer`` and counts its steps."""
        self.__dict__["optimizer"] = optimizer
        self.__dict__["train_step"] = train_step
        self.__dict__["_zero_grad_fn"] = train_step.zero_grad

    @property
    def real_steps(self) -> int:
        """Optimizer steps that updated the weights."""
        return self.train_step.real_steps

    @property
    def skipped_steps(self) -> int:
        """Steps skipped because fp16 gradients overflowed."""
        return self.train_step.skipped_steps

    @property
    def step_was_skipped(self) -> bool:
        """Whether the last ``step()`` call was skipped."""
        return self.train_step.step_was_skipped

    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = value

    @property
    def state(self) -> Any:  # type: ignore[override]
        return self.optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self.optimizer.state = value

    @property
    def defaults(self) -> dict[str, Any]:  # type: ignore[override]
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value: dict[str, Any]) -> None:
        self.optimizer.defaults = value

    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """Unscale (fp16), step unless gradients overflowed, update the scale.

        With a ``closure`` (LBFGS, Lightning) the wrapped optimizer steps with it, as in
        plain PyTorch, and its loss is returned; fp16 and gradient accumulation refuse it
        with the workaround, as torch's own ``GradScaler`` does.
        """
        if closure is not None:
            return self.train_step.step_closure(self.optimizer, closure)
        self.train_step.step(self.optimizer)
        return None

    def step_counts(self) -> dict[str, int]:
        """``{"real": ..., "skipped": ...}``: steps that updated the weights and fp16 overflows."""
        return self.train_step.step_counts()

    def restore_step_counts(self, counts: dict[str, int]) -> None:
        """Set the step counts from :meth:`step_counts`'s output (a restored checkpoint)."""
        self.train_step.restore_step_counts(counts)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear gradients (not mid accumulation window); ``set_to_none`` frees their memory
        instead of writing zeros."""
        self._zero_grad_fn(self.optimizer, set_to_none)

    def state_dict(self) -> dict[str, Any]:  # type: ignore[override]
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:  # type: ignore[override]
        self.optimizer.load_state_dict(state_dict)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not found normally: hooks, private fields, extras.
        return getattr(self.__dict__["optimizer"], name)

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"BoostedOptimizer({self.optimizer!r})"


class BoostedScheduler:
    """Wraps an LR scheduler so it advances once per real optimizer step.

    ``step()`` is a no-op when no optimizer step updated the weights since the last
    scheduler step: an fp16 step skipped for overflow does not advance the schedule.
    """

    def __init__(self, scheduler: Any, optimizer: BoostedOptimizer):
        self.scheduler = scheduler
        self._optimizer = optimizer
        self._seen_steps = optimizer.real_steps

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Advance the schedule if the optimizer really stepped since the last call."""
        if self._optimizer.real_steps == self._seen_steps:
            return
        self._seen_steps = self._optimizer.real_steps
        with warnings.catch_warnings():
            for pattern in _ORDER_WARNINGS:
                warnings.filterwarnings("ignore", message=pattern, category=UserWarning)
            self.scheduler.step(*args, **kwargs)

    def sync(self) -> None:
        """Count every optimizer step so far as seen (after restoring a checkpoint)."""
        self._seen_steps = self._optimizer.real_steps

    def state_dict(self) -> dict[str, Any]:
        """The wrapped scheduler's state."""
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the wrapped scheduler's state."""
        self.scheduler.load_state_dict(state_dict)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["scheduler"], name)

    def __repr__(self) -> str:
        return f"BoostedScheduler({self.scheduler!r})"
