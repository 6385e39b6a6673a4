"""Zero-code observation of a training script: instrumentation, profiler window, facts.

Public names::

    run_observed(RunRequest(command=, steps=, warmup=, out_dir=, full=)) -> ObservedRun   run a script observed
    parse_command(command)          the child's target for "python train.py ..." forms
    Instrumentation(recorder)       the patches and hooks, install()/uninstall()
    StepRecorder(spec)              phase times between step boundaries, and the Facts
    ObserveSpec                     what the child is told (step counts, output folder)
    StopObserving                   raised at a step boundary to end the script

Rooms, and the one way their imports flow::

    parent/   request, supervise, tree_facts                   (the torchboost process)
       |          asks for the run, starts the child through torchboost.process, reads back
       v          what it left: facts.json (evidence.observed), the step count, the progress line
    spec.py   the one contract between parent and child: ObserveSpec, the progress line,
       ^          the step count; imports no room
       |
    child/    bootstrap, tree, watchdog, compiling, here       (the observed process)
       v
    hooks/    instrument, host_calls                           (patched in, taken off again)
       v
    record/   recorder and its parts, facts_builder, run_output
       v
    probes/   profile, flop_count, byte_count, replay, quick, describe, hf_trainer, run_length

Each room imports only the rooms below it and the spec (the child uses the hooks and the
recorder; the hooks call into the recorder; the recorder drives the probes); the parent
imports none of the child's rooms, only the spec. Launching, supervising and relaying a
command, the write guard and the start-up hook of a command's tree are no observation:
they stand below this package, in :mod:`torchboost.process`, which ``torchboost run``
uses without importing any of this package. What reaches into the script (the
DataLoader's construction, loggers' filters, its frames, an optimizer's owner) lives below
both this package and the no-code applier (:mod:`torchboost.nocode`), in
:mod:`torchboost.reach`; the child imports the applier, never the other way. The
recorded-trace reader is :mod:`torchboost.diagnose.trace_file`.
"""

from torchboost.observe.hooks.instrument import Instrumentation
from torchboost.observe.record.recorder import StepRecorder, StopObserving
from torchboost.observe.parent.request import RunRequest
from torchboost.observe.parent.supervise import ObservedRun, Progress, UsageError, parse_command, run_observed
from torchboost.observe.spec import ObserveSpec

__all__ = [
    "Instrumentation",
    "ObserveSpec",
    "ObservedRun",
    "RunRequest",
    "Progress",
    "StepRecorder",
    "StopObserving",
    "UsageError",
    "parse_command",
    "run_observed",
]
