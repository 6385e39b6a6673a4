"""What an optimizer steps, in words: the module that owns its parameters.

A GAN's two ``Adam`` s are told apart by what they train: "Adam (generator)", "Adam
(discriminator)". The module is looked for among the script's own objects: the modules
bound to names in the script's frames on the call stack (its globals; its ``main()``'s
locals only where reading them changes nothing, see :mod:`~torchboost.reach.frames`)
and the root modules the loop called. The smallest module holding every one of
the optimizer's parameters names it: its variable name when it is one the script named,
else its attribute path inside one (``model.generator`` reads "generator"), else its
class. Called once per optimizer, at its first step.
"""

from __future__ import annotations

import sys
from typing import Iterable

import torch

from torchboost.reach import frames

__all__ = ["module_names", "stepped_modules"]

_MAX_FRAMES = 32


def _named_in_frames(max_depth: int = _MAX_FRAMES) -> list[tuple[str, torch.nn.Module]]:
    """(name, module) for each module bound to a name in the script's frames above, nearest
    first, as far as they can be read without changing them
    (:func:`~torchboost.reach.frames.script_names`: globals, and locals from Python 3.13)."""
    found: list[tuple[str, torch.nn.Module]] = []
    seen: set[int] = set()
    frame = sys._getframe(1)
    for _ in range(max_depth):
        if frame is None:
            break
        if frames.is_script_frame(frame):
            for scope in frames.script_names(frame):
                for name, value in list(scope.items()):
                    if isinstance(value, torch.nn.Module) and id(value) not in seen and not name.startswith("_"):
                        seen.add(id(value))
                        found.append((name, value))
        frame = frame.f_back
    return found


def _smallest_owner(params: set[int], tops: list[tuple[str | None, torch.nn.Module]]) -> str | None:
    """The name of the smallest module (among ``tops`` and their submodules) holding all of
    ``params``; None when none does."""
    best: tuple[int, str] | None = None
    for name, top in tops:
        for path, module in top.named_modules():
            own = {id(p) for p in module.parameters()}
            if not params <= own or (best is not None and len(own) >= best[0]):
                continue
            label = path.rsplit(".", 1)[-1] if path else name
            best = (len(own), label or type(module).__name__)
    return best[1] if best else None


def stepped_modules(optimizer: torch.optim.Optimizer, roots: Iterable[torch.nn.Module] = ()) -> str | None:
    """What ``optimizer`` steps, in words ("generator"; "encoder + head" when no one
    module holds all its parameters); None when no module of the script's holds any."""
    params = {id(p) for group in optimizer.param_groups for p in group["params"]}
    if not params:
        return None
    named = _named_in_frames()
    known = {id(m) for _, m in named}
    tops: list[tuple[str | None, torch.nn.Module]] = [*named, *((None, r) for r in roots if id(r) not in known)]
    owner = _smallest_owner(params, tops)
    if owner is not None:
        return owner
    parts = [name or type(m).__name__ for name, m in tops if params & {id(p) for p in m.parameters()}]
    return " + ".join(dict.fromkeys(parts)) or None


def module_names(modules: Iterable[torch.nn.Module]) -> list[str]:
    """Each of ``modules`` by the script's name for it (a variable in a frame on the call
    stack), else by its class."""
    named = {id(m): name for name, m in reversed(_named_in_frames())}  # the nearest frame's name wins
    return [named.get(id(m)) or type(m).__name__ for m in modules]
