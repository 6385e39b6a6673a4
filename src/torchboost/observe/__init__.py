"""Zero-code observation of a training script: instrumentation, profiler window, child launch.

Public names::

    run_observed(command, steps=, warmup=, out_dir=, full=) -> ObservedRun   run a script observed
    parse_command(command)          the child's target for "python train.py ..." forms
    Instrumentation(recorder)       the patches and hooks, install()/uninstall()
    StepRecorder(spec)              phase times between step boundaries, and the Facts
    ObserveSpec                     what the child is told (step counts, output folder)
    StopObserving                   raised at a step boundary to end the script
"""

from torchboost.observe.hooks.instrument import Instrumentation
from torchboost.observe.record.recorder import StepRecorder, StopObserving
from torchboost.observe.parent.supervise import ObservedRun, Progress, UsageError, parse_command, run_observed
from torchboost.observe.spec import ObserveSpec

__all__ = [
    "Instrumentation",
    "ObserveSpec",
    "ObservedRun",
    "Progress",
    "StepRecorder",
    "StopObserving",
    "UsageError",
    "parse_command",
    "run_observed",
]
