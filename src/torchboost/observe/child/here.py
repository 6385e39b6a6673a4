"""Observe a training loop in this very process: the doctor's hooks, window and probes around
one call of the user's function (a notebook cell's loop), taken off again after.

The command runs the script in a child process and stops it after its steps; here the
loop is the user's own process (a Jupyter kernel), which must go on. So, as in the child
(:mod:`torchboost.observe.child.bootstrap`), the same :class:`StepRecorder` and
:class:`Instrumentation` are installed, and at the step where the command would stop the
script the recorder raises :class:`StopObserving` in the loop: a ``SystemExit`` that the
loop's ``except Exception`` does not catch and whose ``finally`` blocks run; it is caught
here, at the call, and the call returns. The rest differs from the child's only where a
process of its own is needed: no stall watchdog (nothing here may end the process), no
signal handler, no write guard (the loop writes what it writes, as under ``doctor
--full``) and no trial settings; no parent relays the process's output, so the profiler's
own lines (Kineto's ``profiler_start``, written to descriptor 2, which a notebook's cell
shows) are sorted out around each call of the profiler, into ``profiler.log`` as the
command's are (:func:`~torchboost.process.relay.profiler_lines_to`). Everything installed
is taken off on the way out, however the call ends; the user's own exception, or Ctrl-C,
is raised again after. Nothing is left registered to run at the interpreter's exit.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

from torchboost import handover
from torchboost.evidence.observed import Facts
from torchboost.observe.child.bootstrap import finish
from torchboost.observe.hooks.instrument import Instrumentation
from torchboost.observe.record.recorder import StepRecorder, StopObserving
from torchboost.observe.spec import FACTS_FILE, ObserveSpec
from torchboost.process.relay import PROFILER_LOG, profiler_lines_to

__all__ = ["ObservedCall", "observe_call"]


@dataclass
class ObservedCall:
    """What one observed call gave."""

    facts: Facts
    """What the recorder saw, as the child writes it to facts.json."""
    ended: str
    """"stopped" (after the steps asked for), "finished" (the function returned first) or
    "crashed" (it raised; the exception is raised again after the facts are written)."""
    result: Any = None
    """The function's return value when it finished; None when stopped."""


def observe_call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                 spec: ObserveSpec) -> ObservedCall:
    """Call ``fn(*args, **kwargs)`` observed as the doctor's child observes a script, in
    this process; the observer is off again when this returns or raises. ``spec.out_dir``
    receives facts.json, the profiler's trace and its own lines, profiler.log (an earlier
    run's are removed first)."""
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for stale in (out / FACTS_FILE, spec.trace_path, out / PROFILER_LOG):
        stale.unlink(missing_ok=True)  # an earlier run's must not pass for this one's
    recorder = StepRecorder(spec, claims=handover.process_claims(),
                            profiler_quiet=partial(profiler_lines_to, out / PROFILER_LOG))
    instrumentation = Instrumentation(recorder).install()
    exit_code, result, raised, facts = 0, None, None, None
    try:
        result = fn(*args, **kwargs)
        recorder.run.ended = "finished"
    except StopObserving:
        recorder.run.ended = "stopped"
    except BaseException as exc:  # noqa: BLE001 - the user's own, raised again once the observer is off
        recorder.run.ended, exit_code, raised = "crashed", 1, exc
    finally:
        facts = finish(recorder, None, instrumentation, None, exit_code)
    if raised is not None:
        raise raised
    if facts is None:  # facts.json could not be written (said on stderr): the facts in memory
        facts = recorder.facts()
    return ObservedCall(facts=facts, ended=recorder.run.ended, result=result)
