"""Child-process entry: install the observer, run the user's script as ``__main__``, write facts.

Usage (started by :func:`torchboost.observe.run_observed`, not by hand)::

    python -m torchboost.observe.child.bootstrap SPEC.json -- SCRIPT.py ARGS...
    python -m torchboost.observe.child.bootstrap SPEC.json -- -m PACKAGE.MODULE ARGS...

The script sees the ``sys.argv`` and ``sys.path[0]`` it would see if run directly. The
exit status is the script's own: 0 when the observer stopped it after enough steps or
it finished, its ``sys.exit`` code, or 1 after an uncaught exception (whose traceback
is printed to stderr as Python would).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Sequence

from torchboost import env as _env
from torchboost import handover
from torchboost.evidence.observed import Facts
from torchboost.nocode import Applier
from torchboost.process.guard.guard_spec import WriteGuardSpec
from torchboost.observe.hooks.instrument import Instrumentation
from torchboost.process.guard.write_guard import WriteGuard
from torchboost.observe.record.recorder import StepRecorder, StopObserving
from torchboost.observe.spec import ObserveSpec
from torchboost.observe.child.watchdog import StallWatchdog, die_with_parent
from torchboost.process.target import Terminated, exit_status, print_user_traceback, run_target, terminate

__all__ = ["main", "finish", "guard_of", "release_process_group"]

_USAGE = "usage: python -m torchboost.observe.child.bootstrap SPEC.json -- (SCRIPT | -m MODULE) [ARGS...]"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the target under observation; returns the exit status to leave with."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 3 or argv[1] != "--" or (argv[2] == "-m" and len(argv) < 4):
        print(_USAGE, file=sys.stderr)
        return 2
    # Under torchrun every rank runs this; each writes its own files.
    spec = ObserveSpec.read(argv[0]).for_rank(_env.rank())
    # One Claims for the process: a Booster in the script claims there what it applies;
    # the applier then stands down for it and the recorder reports that a Booster ran.
    claims = handover.process_claims()
    # A tuning trial's plan, read once: what only a Booster can apply (fp16, accumulation) is
    # left to the Booster, which reads the same hand-over; the rest is applied from outside,
    # and a burst trial's switches are the recorder's to alternate.
    plan = handover.trial_plan()
    recorder = StepRecorder(spec, claims=claims, bursts=plan.bursts if plan is not None else None)
    # Our parent: torchboost (from the spec: it may already be gone, and then getppid() is
    # init's), or under torchrun the agent that started this rank.
    parent = os.getppid() if _env.is_torchrun_rank() or spec.parent_pid is None else spec.parent_pid
    polls_parent = not die_with_parent(parent)
    watchdog = StallWatchdog(recorder, spec.stall_timeout_s or float("inf"),
                             parent_pid=parent if polls_parent else None).start()
    applier = Applier(plan, claims=claims).install() if plan is not None and plan.apply else None
    guard = guard_of(spec)
    instrumentation = Instrumentation(recorder).install()
    exit_code = 0
    signal.signal(signal.SIGTERM, terminate)  # a stop passed on by torchboost: write the facts first
    try:
        run_target(argv[2:])
        recorder.run.ended = "finished"
    except StopObserving:
        recorder.run.ended = "stopped"
    except SystemExit as exc:
        exit_code = exit_status(exc.code)
        recorder.run.ended = "finished" if exit_code == 0 else "crashed"
    except (KeyboardInterrupt, Terminated) as exc:
        signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
        recorder.run.ended, exit_code, recorder.run.signal = "killed", 128 + signum, signal.Signals(signum).name
    except BaseException as exc:  # noqa: BLE001 - the user's crash, reported as Python would
        print_user_traceback(exc)
        recorder.run.ended, exit_code = "crashed", 1
    finally:
        finish(recorder, watchdog, instrumentation, applier, exit_code)
        if recorder.run.ended == "stopped":
            release_process_group()
        if guard is not None:
            guard.uninstall()
    return exit_code


def release_process_group() -> None:
    """Destroy the default process group of a rank the observer stopped, as the script's own
    end (``destroy_process_group()``, or a barrier and ``os._exit``) would have: stopped
    mid-loop, the rank otherwise leaves gloo's worker threads holding their work's tensors
    while the interpreter is torn down, and it can abort (SIGABRT, "malloc(): ... corrupted")
    after a clean stop. The stop is at the same step boundary on every rank, after the
    step's collectives; a failure here leaves the stop a stop."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the facts are written; the process ends as it would have
        pass


def guard_of(spec: ObserveSpec) -> WriteGuard | None:
    """The write guard the spec asks for, installed (None: the run's writes stay)."""
    return WriteGuard(WriteGuardSpec.from_dict(spec.guard)).install() if spec.guard else None


def finish(recorder: StepRecorder, watchdog: StallWatchdog | None, instrumentation: Instrumentation,
           applier: Applier | None, exit_code: int) -> Facts | None:
    """The observed process's end: take the observer off, write the facts with ``exit_code``;
    returns them (None when they could not be written). A loop observed in the user's own
    process (:mod:`torchboost.observe.child.here`) has no watchdog."""
    if watchdog is not None:
        watchdog.stop()
    instrumentation.uninstall()
    if applier is not None:
        applier.uninstall()
        recorder.run.applied = list(applier.notes)
    if recorder.host.lines is not None:
        recorder.host.lines.stop()
    recorder.stages.profile.close()
    recorder.stages.quick.close()  # a probe step the script's end cut short: its switch off
    recorder.stages.flops.stop(keep=False)  # a step the script's end cut short is not counted
    try:
        return recorder.write_facts(exit_code)
    except Exception as exc:  # noqa: BLE001 - keep the script's own exit status
        if not (isinstance(exc, OSError) and recorder.spec.count_path):  # else the parent says it, once
            print(f"torchboost: could not write {recorder.spec.facts_path}: {exc}", file=sys.stderr)
        return None


if __name__ == "__main__":
    sys.exit(main())
