"""Start-up hook of every Python process of a command torchboost starts.

The doctor, tune and ``torchboost run`` of a launcher put this folder first on the
``PYTHONPATH`` of the command they start and name their tree's spec file in
``TORCHBOOST_OBSERVE_TREE`` (:data:`torchboost.process.tree_spec.TREE_ENV`), so every Python
process of the command's tree (a shell wrapper's ``python``, ``accelerate launch``'s
worker, ranks spawned with ``torch.multiprocessing``) loads this module when it starts, as Python loads any
``sitecustomize``. It uses the standard library alone (importing torchboost would import
torch into processes that never do): it leaves one line naming the process in the
spec's folder, starts the write guard the spec asks for at once, from the process's first
line (a wrapper's ``python prep.py`` that never imports torch writes the user's files too),
and once the process imports torch it hands over to :mod:`torchboost.process.tree_start`,
which gives the guard torch's savers and starts the rest of what the spec asks. Then it
runs the ``sitecustomize`` that was next on the path (the user's own, or the
installation's), so that one is not lost.

The guard's modules use the standard library alone too; they are loaded under their own
names with torchboost's packages stood in by bare ones for the while (their ``__init__``
would import torch), and a later ``import torchboost`` finds them loaded.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys

_ENV = "TORCHBOOST_OBSERVE_TREE"
_HELLO_DIR = "processes"  # torchboost.process.tree_spec.HELLO_DIR
_HERE = os.path.dirname(os.path.abspath(__file__))
_OBSERVED_ELSEWHERE = (
    "torchboost.observe.child.bootstrap",  # the observed child: starts its guard and observer itself
    "torch.distributed.run",  # torchrun's agent: its ranks run the bootstrap
    "torch._inductor.compile_worker",  # torch.compile's helpers never train
)


def _module(argv: list[str]) -> str | None:
    """The module of ``python [OPTIONS] -m MODULE ...``, else None."""
    for i, word in enumerate(argv[1:-1], start=1):
        if word == "-m":
            return argv[i + 1]
        if not word.startswith("-"):
            return None
    return None


def _is_torchboost(argv: list[str]) -> bool:
    """torchboost's own command (``python -m torchboost.cli run`` in tune's end-to-end check):
    it imports torch while its own modules are half loaded, so it starts its guard itself,
    once they are (``torchboost.cli.run``)."""
    return _module(argv) == "torchboost.cli" or (len(argv) > 1 and os.path.basename(argv[1]) == "torchboost")


def _hello(spec_path: str) -> None:
    """One line for the parent's list of the processes that ran."""
    folder = os.path.join(os.path.dirname(spec_path), _HELLO_DIR)
    line = json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "argv": list(sys.orig_argv)})
    try:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{os.getpid()}.json"), "w", encoding="utf-8") as fh:
            fh.write(line)
    except OSError:
        pass  # the list of processes is a courtesy; observation does not depend on it


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Lets ``import torch`` run as usual, then starts what the tree's spec asks in this process."""

    def __init__(self, spec_path: str) -> None:
        self.spec_path = spec_path

    def find_spec(self, name, path=None, target=None):  # noqa: D102 - the finder protocol
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        run, spec_path = spec.loader.exec_module, self.spec_path

        def exec_module(module):
            run(module)
            _start(spec_path)

        spec.loader.exec_module = exec_module
        return spec


def _start(spec_path: str) -> None:
    try:
        from torchboost.process import tree_start

        tree_start.start(spec_path)
    except Exception as exc:  # noqa: BLE001 - the user's process runs on, unobserved
        print(f"torchboost: this process ({' '.join(sys.orig_argv)[:80]}) is not observed: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)


def _guard_modules():
    """``torchboost.process.guard.write_guard`` and its ``guard_spec``, loaded without running
    the ``__init__`` of the packages above them."""
    import types

    process = os.path.dirname(_HERE)
    folders = {"torchboost": os.path.dirname(process), "torchboost.process": process,
               "torchboost.process.guard": os.path.join(process, "guard")}
    stood_in = []
    for name, folder in folders.items():
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [folder]
            sys.modules[name] = package
            stood_in.append(name)
    try:
        return (importlib.import_module("torchboost.process.guard.write_guard"),
                importlib.import_module("torchboost.process.guard.guard_spec"))
    finally:
        for name in stood_in:
            del sys.modules[name]


def _early_guard(spec_path: str) -> None:
    """Install the write guard the tree's spec asks for, now."""
    try:
        with open(spec_path, encoding="utf-8") as fh:
            guard = json.load(fh).get("guard")
        if guard:
            write_guard, guard_spec = _guard_modules()
            write_guard.WriteGuard(guard_spec.WriteGuardSpec.from_dict(guard)).install()
    except Exception as exc:  # noqa: BLE001 - the user's process runs on; the parent's snapshot still looks
        print(f"torchboost: this process ({' '.join(sys.orig_argv)[:80]}) has no write guard: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)


def _next_sitecustomize() -> None:
    """Run the ``sitecustomize`` this one shadows, if there is one."""
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _arm() -> None:
    spec_path = os.environ.get(_ENV)
    if not spec_path or _module(list(sys.orig_argv)) in _OBSERVED_ELSEWHERE:
        return
    _hello(spec_path)
    if not _is_torchboost(list(sys.orig_argv)):
        _early_guard(spec_path)
        sys.meta_path.insert(0, _AfterTorch(spec_path))


_arm()
_next_sitecustomize()
