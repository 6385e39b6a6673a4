"""Where the write guard reaches: the attributes through which Python code changes files.

:class:`~torchboost.process.guard.write_guard.WriteGuard` makes the wrappers; this module
says what they replace, in three parts, each a list of ``(owner, attribute, make)``:

* :func:`base` needs nothing but the standard library, so the guard can start with the
  process, before the script imports anything (a wrapper's ``python prep.py`` that never
  imports torch is guarded too);
* :func:`torch_savers`, once torch is imported: ``torch.save``, TorchScript's and
  ``torch.export``'s savers and the profiler's trace export (C++ writes those files past
  ``open``), safetensors' ``save_file``;
* :func:`open_aliases`: the modules that bound ``open`` to a name of their own when they
  were imported (``tarfile.bltn_open``, ``bz2._builtin_open``), found by identity.

What is wrapped, and why each:

* ``builtins.open`` (``io.open`` is the same object; ``pathlib``, ``shutil.copy``,
  ``logging.FileHandler``, ``numpy.save`` and ``csv`` writers call it), and every module's
  own name for it bound at its import (``tarfile.bltn_open``, ``bz2._builtin_open``): a
  mode that writes. Read-only opens go straight through after one look at the mode, since
  a Dataset opens thousands of files; ``io.FileIO`` opened on a path likewise;
* ``os.open`` with a flag that writes (``tempfile``, ``Path.touch``), ``os.truncate``;
* ``os.replace``, ``os.rename`` (``shutil.move``, ``Path.rename``/``replace``),
  ``os.remove``, ``os.unlink`` (``Path.unlink``), ``os.rmdir``, ``shutil.rmtree``:
  entries that go or are replaced (a tree that holds torchboost's report folder is
  cleared around it: the originals kept there must outlive it);
* ``os.mkdir`` (``os.makedirs``, ``Path.mkdir``), ``os.link``, ``os.symlink``: entries
  the run made, to clear them after;
* ``os.utime`` (``Path.touch`` of an existing file), ``os.chmod``: its times and mode, to
  put them back, and the file remembered as the user's (its ctime moved);
* once torch is imported: ``torch.save`` (and ``torch.serialization.save``, the same
  function), ``torch.jit.save`` and a ScriptModule's ``save``, ``torch.export.save``,
  the profiler's ``export_chrome_trace``, and ``safetensors.torch.save_file`` /
  ``safetensors.numpy.save_file``: given a path, C++ and Rust write the file
  themselves, past ``open``; ``torch.from_file(path, shared=True)``, a tensor whose
  writes go to the file through a memory map;
* ``sqlite3.connect`` (an experiment tracker's database): SQLite writes through its own C
  calls, so the database and its journal files are kept whole before the connection.

Not seen: other writers outside Python (a shell redirection, a C library's ``fopen``).
The parent's snapshot catches what they leave in the user's folders, and each process
names at its end the files it still holds open for writing, as the parent does from the
process tree while it runs, so that those changed are named ("changed outside
torchboost's sight"), never passed over.
"""

from __future__ import annotations

import builtins
import importlib
import io
import os
import shutil
import sys
import urllib.parse
from typing import Any, Callable

__all__ = ["Target", "base", "open_aliases", "sqlite_file", "torch_savers"]

Target = tuple[Any, str, Callable[[Any], Any]]
"""(owner, attribute, make): ``make(original)`` returns the wrapper."""

_OPTIONAL_SAVERS = ("safetensors.torch", "safetensors.numpy")


def base(guard: Any) -> list[Target]:
    """The standard library's writers (``guard``: the WriteGuard whose wrappers they get)."""
    found = [(builtins, "open", guard._open), (io, "open", guard._open), (io, "FileIO", guard._file_io),
             (os, "open", guard._os_open), (os, "truncate", guard._truncate), (os, "replace", guard._rename),
             (os, "rename", guard._rename), (os, "remove", guard._unlink), (os, "unlink", guard._unlink),
             (os, "rmdir", guard._unlink), (os, "mkdir", guard._mkdir), (os, "utime", guard._utime),
             (os, "chmod", guard._utime), (os, "link", guard._link), (os, "symlink", guard._symlink),
             (shutil, "rmtree", guard._rmtree)]
    try:
        import sqlite3
    except ImportError:  # a Python built without it: nothing can call it
        return found
    # sqlite3.connect is sqlite3.dbapi2.connect (SQLAlchemy calls the latter): one wrapper.
    return found + [(sqlite3, "connect", guard._sqlite), (sqlite3.dbapi2, "connect", guard._sqlite)]


def torch_savers(guard: Any, saver: Callable[[int, str], Callable[[Any], Any]]) -> list[Target]:
    """torch's savers that write a path from C++ (``saver(index, keyword)``: a wrapper for a
    function whose argument ``index`` or keyword is the path), and safetensors' when installed."""
    import torch
    import torch.serialization
    from torch.autograd import profiler as autograd_profiler
    from torch.jit._script import RecursiveScriptModule

    found = [(torch, "save", saver(1, "f")), (torch.serialization, "save", saver(1, "f")),
             (torch.jit, "save", saver(1, "f")), (RecursiveScriptModule, "save", saver(1, "f")),
             (_defining(torch.profiler.profile, "export_chrome_trace"), "export_chrome_trace", saver(1, "path")),
             (_defining(autograd_profiler.profile, "export_chrome_trace"), "export_chrome_trace", saver(1, "path"))]
    found.append((torch, "from_file", guard._from_file))
    if hasattr(torch, "export") and hasattr(torch.export, "save"):
        found.append((torch.export, "save", saver(1, "f")))
    for name in _OPTIONAL_SAVERS:
        try:
            module = importlib.import_module(name)
        except ImportError:  # not installed: nothing can call it
            continue
        found.append((module, "save_file", saver(1, "filename")))
    return found


def _defining(cls: type, name: str) -> type:
    """The class of ``cls``'s MRO that defines ``name``: the one to patch (and put back)."""
    return next(c for c in cls.__mro__ if name in c.__dict__)


def open_aliases(original: Any, wrapper: Any) -> list[tuple[Any, str]]:
    """(module, attribute) of every loaded module but ``builtins`` and ``io`` (wrapped
    already) holding ``original``, the builtin ``open``, as it was bound at its import."""
    found = []
    for module in list(sys.modules.values()):
        names = getattr(module, "__dict__", None)
        if not isinstance(names, dict) or module is builtins or module is io:
            continue
        for name, value in list(names.items()):
            if value is original and value is not wrapper:
                found.append((module, name))
    return found


def sqlite_file(database: Any, uri: Any) -> str | None:
    """The file ``sqlite3.connect(database, uri=uri)`` may write; None for an in-memory
    database, a URI opened read-only (``mode=ro``, ``immutable=1``), or no path at all."""
    if not isinstance(database, (str, bytes, os.PathLike)):
        return None
    name = os.fsdecode(os.fspath(database))
    if uri and name.startswith("file:"):
        parts = urllib.parse.urlsplit(name)
        query = urllib.parse.parse_qs(parts.query)
        if query.get("mode", [""])[-1] in ("ro", "memory") or query.get("immutable", ["0"])[-1] == "1":
            return None
        name = urllib.parse.unquote(parts.path)
    return None if name in ("", ":memory:") else name
