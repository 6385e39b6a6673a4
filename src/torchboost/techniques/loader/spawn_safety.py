"""Whether loader workers can start where they are started by spawn (macOS, Windows).

A worker started by ``fork`` (Linux's default) inherits the training process as it is.
One started by ``spawn`` (macOS's and Windows' default, or a loader's
``multiprocessing_context="spawn"``) or ``forkserver`` is a fresh interpreter: it gets the
dataset, ``collate_fn`` and ``worker_init_fn`` pickled, and imports the script again as
``__mp_main__``. So workers break a run where:

- one of them does not pickle (a lambda transform, an open file, a local class);
- the script has no ``if __name__ == "__main__":`` guard: each worker would run the
  training from the top (torch then stops on "an attempt has been made to start a new
  process before the current process has finished its bootstrapping phase");
- in a notebook (``__main__`` without a file), one of them is defined in the notebook
  itself: a worker has no notebook to import it from.

:func:`spawn_refusal` says which, in words, or None when workers can start; torchboost
proposes and applies more workers only then. The pickling probe skips tensors' and
arrays' bytes (:class:`_Probe`): it asks only whether the rest pickles, at no copy of the
data.
"""

from __future__ import annotations

import ast
import io
import multiprocessing
import pickle
import sys
import types
from pathlib import Path
from typing import Any

import torch

__all__ = ["FORKING", "main_file_guarded", "spawn_refusal", "start_method"]

FORKING = "fork"
"""The one start method whose workers inherit the training process rather than pickling it."""


def start_method(context: Any = None) -> str:
    """How a loader's workers start: its ``multiprocessing_context`` (a name or a context),
    else the start method set for this process, else the platform's default as CPython
    chooses it (spawn on macOS and Windows, forkserver on Linux from Python 3.14, fork
    before). Reading it sets nothing."""
    if isinstance(context, str):
        return context
    if context is not None and hasattr(context, "get_start_method"):
        return str(context.get_start_method())
    chosen = multiprocessing.get_start_method(allow_none=True)
    if chosen is not None:
        return chosen
    if sys.platform in ("darwin", "win32"):
        return "spawn"
    return "forkserver" if sys.version_info >= (3, 14) else FORKING


class _Sink(io.RawIOBase):
    def write(self, data: Any) -> int:  # type: ignore[override]
        return len(data)

    def writable(self) -> bool:
        return True


class _Probe(pickle.Pickler):
    """Pickles to nowhere, skipping tensors' and arrays' bytes, and notes what it pickles by
    reference to ``__main__`` (classes and functions a worker must import from there)."""

    def __init__(self) -> None:
        super().__init__(_Sink(), protocol=pickle.HIGHEST_PROTOCOL)
        self.from_main: set[str] = set()

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor) or type(obj).__name__ == "ndarray":
            return (int, ())  # the payload pickles: only the rest is in question
        if isinstance(obj, (type, types.FunctionType)) and getattr(obj, "__module__", None) == "__main__":
            self.from_main.add(getattr(obj, "__qualname__", repr(obj)))
        return NotImplemented


def _pickle_problem(parts: tuple[Any, ...]) -> tuple[str | None, set[str]]:
    """Why ``parts`` do not pickle (None when they do), and the names they take from ``__main__``."""
    probe = _Probe()
    try:
        probe.dump(parts)
    except Exception as exc:  # noqa: BLE001 - any pickling failure is the answer
        return f"{type(exc).__name__}: {exc}", probe.from_main
    return None, probe.from_main


def main_file_guarded(path: str | Path) -> bool | None:
    """True when the file at ``path`` has an ``if __name__ == "__main__":`` at its top level;
    None when it cannot be read or parsed."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None
    return any(isinstance(node, ast.If) and _is_main_test(node.test) for node in tree.body)


def _is_main_test(test: ast.expr) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    values = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and values == ["__main__"]


def spawn_refusal(dataset: Any, context: Any = None, *, collate_fn: Any = None, worker_init_fn: Any = None,
                  main_file: str | None | bool = True) -> str | None:
    """Why loader workers cannot start here, in words; None when they can (always under
    fork). ``main_file``: the script's path (None: a notebook or REPL, no file), True to
    read it from ``sys.modules["__main__"]``."""
    method = start_method(context)
    if method == FORKING:
        return None
    if main_file is True:
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    how = f"workers started by {method} get the dataset pickled"
    problem, from_main = _pickle_problem((dataset, collate_fn, worker_init_fn))
    if problem is not None:
        return f"{type(dataset).__name__} does not pickle ({problem}), and {how}"
    if main_file is None and from_main:
        return (f"{', '.join(sorted(from_main))} {'is' if len(from_main) == 1 else 'are'} defined in the notebook, "
                f"and workers started by {method} cannot import {'it' if len(from_main) == 1 else 'them'} from "
                "there; move the dataset's code to a .py module")
    if main_file is not None and not main_file_guarded(main_file):
        return (f"{Path(str(main_file)).name} has no `if __name__ == \"__main__\":` guard, and each worker started "
                f"by {method} imports the script again: it would run the training from the top")
    return None
