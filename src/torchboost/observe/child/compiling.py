"""Whether the script is compiling right now: torch.compile's frames on a thread's stack.

A first compile takes tens of seconds to minutes and happens inside the forward (Dynamo
traces the frame, Inductor generates code) or inside the backward (AOTAutograd compiles
the backward lazily, on its first call, possibly on an autograd thread). The stall
watchdog must not call that a stall. It asks :func:`compiling_now` twice a second: a
walk of every Python thread's stack (``sys._current_frames``), looking for the
functions that run only while compiling — never those a compiled graph runs through
once it is compiled, so a compiled model at work is not "compiling".
"""

from __future__ import annotations

import sys
import threading
from types import FrameType

__all__ = ["COMPILE_FRAMES", "compiling_now", "is_compile_frame"]

COMPILE_FRAMES: tuple[tuple[str, str | None], ...] = (
    ("torch/_dynamo/convert_frame.py", None),  # Dynamo's entry on a cache miss: tracing a new frame
    ("torch/_inductor/compile_fx.py", None),  # Inductor lowering and code generation
    ("torch/_functorch/_aot_autograd/runtime_wrappers.py", "_backward_impl"),  # a lazy backward compile
)
"""(file path ending, function or None for any) of the frames that mean "compiling"."""


def is_compile_frame(frame: FrameType) -> bool:
    """``frame`` is one of torch.compile's compiling functions (see :data:`COMPILE_FRAMES`)."""
    code = frame.f_code
    path = code.co_filename.replace("\\", "/")
    for ending, function in COMPILE_FRAMES:
        if path.endswith(ending) and (function is None or code.co_name == function):
            return True
    return False


def compiling_now(*, skip_thread: int | None = None) -> bool:
    """True when some thread (other than ``skip_thread``, the caller's own by default) is
    inside torch.compile's compilation. Cheap: no torch import, a walk of the stacks."""
    if "torch._dynamo" not in sys.modules:
        return False  # nothing can be compiling before Dynamo is imported
    skip = threading.get_ident() if skip_thread is None else skip_thread
    for ident, frame in sys._current_frames().items():
        if ident == skip:
            continue
        walk: FrameType | None = frame
        while walk is not None:
            if is_compile_frame(walk):
                return True
            walk = walk.f_back
    return False
