"""What a Python process of a command's tree starts, once it has imported torch.

Called by the start-up hook (:mod:`torchboost.process.inject.sitecustomize`) with the
:class:`~torchboost.process.tree_spec.TreeSpec`'s path: the write guard first (started with
the process by the hook, it gains torch's savers now; uninstalled by its own exit hook,
after every other), then the settings handed over
(:mod:`torchboost.handover`), applied from outside by the no-code applier, then the
observer the spec names, if any, which is given the applier. A process that is not
observed says at its end what held of the settings, as ``torchboost run`` says it for
``python train.py``.

torchboost's own command-line process (``torchboost run`` in tune's end-to-end check) is
only guarded: it applies the settings itself.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys

from torchboost import env as _env
from torchboost import handover
from torchboost.nocode import Applier
from torchboost.process.guard.guard_spec import WriteGuardSpec
from torchboost.process.guard.write_guard import WriteGuard
from torchboost.process.tree_spec import TreeSpec

__all__ = ["start"]


def start(spec_path: str) -> object | None:
    """Start what the spec asks of this process; returns what the observer returns (its
    recorder), None when the process is not observed."""
    tree = TreeSpec.read(spec_path)
    if tree.guard and WriteGuard._active is not None:  # started with the process: now torch's savers too
        WriteGuard._active.add_torch()
    elif tree.guard:
        WriteGuard(WriteGuardSpec.from_dict(tree.guard)).install()
    if _is_torchboost(sys.orig_argv):
        return None
    claims = handover.process_claims()
    plan = handover.trial_plan()
    applier = Applier(plan, claims=claims).install() if plan is not None and plan.apply else None
    if tree.observer is not None:
        # Named by the starter, not imported here: the observer stands above this room.
        observer = importlib.import_module(tree.observer)
        return observer.observe_process(tree.observe_spec, applier=applier, claims=claims,
                                        bursts=plan.bursts if plan is not None else None)
    if applier is not None:
        atexit.register(_say_applied, applier)
    return None


def _say_applied(applier: Applier) -> None:
    """``torchboost run`` of a command's tree: what held in this process, where it trained
    (as ``torchboost run`` says it for ``python train.py``); rank 0 speaks for a job."""
    stepped = applier.effect is not None  # read at its first optimizer step; a helper process never steps
    applier.uninstall()
    place = _env.job_place() or (_env.rank(), 1)
    if stepped and applier.effect and place[0] == 0:
        print(f"torchboost run: applied in pid {os.getpid()} ({' '.join(sys.orig_argv[1:])[:60]}), as at "
              f"{applier.effect_at}: {'; '.join(applier.effect)}", file=sys.stderr)


def _is_torchboost(argv: list[str]) -> bool:
    """``torchboost ...`` or ``python -m torchboost.cli ...``."""
    words = [os.path.basename(w) for w in argv[:3]]
    return "torchboost" in words[1:2] or "torchboost.cli" in words
