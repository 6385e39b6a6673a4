"""The one place the observer reads the frames on the call stack, leaving them as they were.

Before Python 3.13 a function frame's ``f_locals`` is no view: reading it copies the
frame's locals into the one dict that ``locals()`` returns in that frame, and that dict
keeps them. A script holding ``hparams = locals()`` would see its dict grow with every
local of the function (and ``json.dumps(hparams)`` then fail on a circular reference);
a tensor the script ``del``-s would live on in the copy, holding its memory. So a
function's locals are read (:func:`frame_locals`):

* from Python 3.13 as they are (a view, PEP 667: reading copies nothing);
* before, only from a function whose code names none of the ways to hold that dict
  (``locals``, ``vars``, ``f_locals``, ``_getframe``, ``currentframe``), and the copy the read
  made is emptied at once when no one else holds it: nothing of the script's is kept alive.

:func:`script_names` reads a script's frame (its own code, not a library's): its
function's locals so, and its module's globals (a dict read in place, copying nothing).
:func:`self_of` reads the ``self`` of a library method's frame (a GradScaler's ``step``, a
Trainer's loop) the same way.
"""

from __future__ import annotations

import inspect
import os
import sys
import sysconfig
import types
from typing import Any, Mapping

__all__ = ["LOCALS_ARE_A_VIEW", "frame_locals", "is_script_frame", "method_codes", "script_names", "self_of"]

LOCALS_ARE_A_VIEW = sys.version_info >= (3, 13)
"""``frame.f_locals`` of a function is a view (PEP 667): reading it copies nothing."""


def _libraries() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return tuple(os.path.abspath(p) + os.sep for p in {paths["stdlib"], paths["purelib"], paths["platlib"], here})


_LIBRARIES = _libraries()
"""The standard library, installed packages and torchboost itself: code that is not the script's."""


def is_script_frame(frame: types.FrameType) -> bool:
    """``frame`` runs the script's own code: a file outside the libraries (not ``<string>``)."""
    path = frame.f_code.co_filename
    return not path.startswith("<") and not os.path.abspath(path).startswith(_LIBRARIES)


_HOLDS_LOCALS = frozenset({"locals", "vars", "f_locals", "_getframe", "currentframe"})
"""Names in a function's code that may hold its ``locals()`` dict: its locals are not read then."""


def frame_locals(frame: types.FrameType) -> Mapping[str, Any]:
    """A copy of a function ``frame``'s locals, leaving the frame and any ``locals()`` dict
    of the script's as they were (the module docstring says how); {} where that cannot be."""
    if LOCALS_ARE_A_VIEW:
        return dict(frame.f_locals)
    if _HOLDS_LOCALS & set(frame.f_code.co_names):
        return {}
    cache = frame.f_locals  # the frame's own dict, filled by this read
    copy = dict(cache)
    if sys.getrefcount(cache) <= 3:  # the frame, this name, the call's argument: ours alone
        cache.clear()
    return copy


def script_names(frame: types.FrameType) -> list[Mapping[str, Any]]:
    """The scopes of ``frame``, innermost first: its function's locals (:func:`frame_locals`)
    and its module's globals."""
    if not frame.f_code.co_flags & inspect.CO_OPTIMIZED:  # module-level code: its locals are its globals
        return [frame.f_globals]
    return [frame_locals(frame), frame.f_globals]


def method_codes(kind: type) -> frozenset[types.CodeType]:
    """The code of every function defined on ``kind`` and its bases, a decorator's wrapper
    and what it wraps alike (a few ``__wrapped__`` deep); never raises."""
    codes = set()
    for cls in kind.__mro__:
        for value in vars(cls).values():
            function = getattr(value, "__func__", value)  # a classmethod's or staticmethod's function
            for _ in range(4):
                code = getattr(function, "__code__", None)
                if isinstance(code, types.CodeType):
                    codes.add(code)
                function = getattr(function, "__wrapped__", None)
                if function is None:
                    break
    return frozenset(codes)


def self_of(frame: types.FrameType) -> Any:
    """The ``self`` of a library method's ``frame`` (None when it has none), read as
    :func:`frame_locals` reads."""
    return frame_locals(frame).get("self")
