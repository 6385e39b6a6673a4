"""Model surgery shared by the techniques: repeated blocks, instance forwards, convolutions.

Private to the techniques. Regional compile and activation checkpointing act on the same
blocks (:func:`find_repeated_blocks`) and in the same way: a callable installed as the
``forward`` *instance* attribute of a module (:class:`InstanceForward`), so the model
object, its parameters and its ``state_dict()`` keys stay exactly the user's, hooks keep
running, and removing the attribute gives the class's forward back. channels_last and
cudnn's autotuner both ask whether a model has 2-D convolutions (:func:`has_conv2d`).
"""

from __future__ import annotations

from typing import Any

from torch import nn

__all__ = ["InstanceForward", "find_repeated_blocks", "has_conv2d", "remove_forwards"]


def find_repeated_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The blocks regional compilation compiles, as ``(qualified name, module)``.

    A block is a child of a ``ModuleList`` or ``Sequential`` whose class occurs at least
    twice among its siblings and which has children of its own (a stack of bare
    ``Linear`` layers is not worth compiling piecewise). Blocks nested inside a chosen
    block are not chosen again.
    """
    blocks: list[tuple[str, nn.Module]] = []
    for name, container in model.named_modules():
        if not isinstance(container, (nn.ModuleList, nn.Sequential)):
            continue
        if any(name == b or name.startswith(b + ".") for b, _ in blocks):
            continue
        children = list(container.named_children())
        counts: dict[type, int] = {}
        for _, child in children:
            counts[type(child)] = counts.get(type(child), 0) + 1
        for child_name, child in children:
            if counts[type(child)] >= 2 and next(child.children(), None) is not None:
                blocks.append((f"{name}.{child_name}" if name else child_name, child))
    return blocks


class InstanceForward:
    """A module's instance ``forward``, holding the forward it replaces.

    It keeps the class's *unbound* ``forward`` and passes the module in, so a
    ``copy.deepcopy`` of the model gets a forward bound to the copy, not the original,
    and every block of one class shares one function. A forward someone else already put
    on the instance is kept and called as it is. Subclasses define ``__call__``.
    """

    def __init__(self, module: nn.Module) -> None:
        forward = module.forward
        if getattr(forward, "__self__", None) is module:
            self._func = forward.__func__
        else:  # forward was already replaced on the instance by someone else: keep theirs
            self._func = lambda _module, *args, **kwargs: forward(*args, **kwargs)
        self._module = module

    def plain(self, *args: Any, **kwargs: Any) -> Any:
        """The forward this one replaced, on the module."""
        return self._func(self._module, *args, **kwargs)

    @classmethod
    def installed_on(cls, module: nn.Module) -> bool:
        """Whether ``module``'s instance forward is one of this class."""
        return isinstance(module.__dict__.get("forward"), cls)


def remove_forwards(model: nn.Module, kind: type[InstanceForward]) -> int:
    """Delete every instance forward of class ``kind`` from ``model`` and its submodules;
    how many modules run their class's forward again."""
    removed = 0
    for module in model.modules():
        if kind.installed_on(module):
            del module.__dict__["forward"]
            removed += 1
    return removed


_CONV2D = (nn.Conv2d, nn.ConvTranspose2d)
"""Both run 4-D weights through cudnn, so memory format and algorithm choice matter to both."""


def has_conv2d(model: nn.Module) -> bool:
    """The model contains a 2-D convolution (4-D weight) that channels_last affects."""
    return any(isinstance(m, _CONV2D) for m in model.modules())
