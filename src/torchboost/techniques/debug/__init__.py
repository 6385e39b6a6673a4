"""Debugging switches left on in a training script: ``[debug]``, their facts, findings and lever.

A script often keeps what helped it find a bug: ``torch.autograd.set_detect_anomaly(True)``
at its top, a profiler around its loop, a debugger or coverage tool attached,
``CUDA_LAUNCH_BLOCKING=1`` or ``TORCH_LOGS`` in the shell, deterministic kernels forced,
Python's dev mode. Each slows every step and none changes what is trained. The doctor reads
them from the running script (:mod:`~torchboost.techniques.debug.debug_facts`) and names
the one that is on, with the line to remove or guard
(:mod:`~torchboost.techniques.debug.debug_diagnosis`).

Anomaly detection is also a setting: ``[debug] detect_anomaly = false`` turns it off after
the script's set-up (the Booster's ``prepare``; from outside, ``torchboost run`` and tune's
trials at the script's first optimizer step), and it can be switched between two steps,
so the doctor times it (its quick probe) and tune confirms it in bursts. Nothing the script
set is changed unless the file says so: ``"auto"`` leaves it as the script has it. The
others are set before Python or torch starts, or are the script's own choice: advice only.
"""

from __future__ import annotations

from typing import Any

import torch

from torchboost.config import AUTO, KEEP, Overlay
from torchboost.techniques.debug.debug_diagnosis import (
    EXAMPLES, anomaly_on, cpp_stacktraces_on, deterministic_on, dev_mode_on, launch_blocking_on, profiler_on,
    torch_logs_on, tracer_on,
)
from torchboost.techniques.debug.debug_facts import DebugFacts, probe_debug
from torchboost.techniques.debug.debug_settings import DebugConfig
from torchboost.techniques.registry import (
    FrameworkSpelling, Lever, NoCode, Parity, Preparation, ProbeContext, QuickSwitch, ResolveContext, Resolution, Rule,
    Technique, TuneContext,
)

__all__ = ["DebugConfig", "DebugFacts", "TECHNIQUE", "anomaly_off", "quick_switch"]



def _off() -> Overlay:
    """The lever's one change (built when asked: the section registers after the modules load)."""
    return Overlay.of(DebugConfig, detect_anomaly=False)


def anomaly_off() -> str | None:
    """Turn autograd's anomaly detection off; what was done, in words, or None when it was off."""
    if not torch.is_anomaly_enabled():
        return None
    torch.set_anomaly_enabled(False)
    return "autograd's anomaly detection turned off (the script had it on)"


def _resolve(ctx: ResolveContext) -> Resolution:
    value = ctx.config.section(DebugConfig).detect_anomaly
    if value == AUTO:
        # Never turned off unasked: the script may be looking for a NaN's origin.
        return Resolution(Overlay.of(DebugConfig, detect_anomaly=KEEP),
                          {"debug.detect_anomaly": "auto leaves anomaly detection as the script set it "
                                                   "(torchboost doctor says when it is on)"})
    return Resolution(Overlay.of(DebugConfig, detect_anomaly=value), {"debug.detect_anomaly": "set in config"})


def _apply(prep: Preparation) -> None:
    # prepare() comes after the script's own set-up, where a leftover set_detect_anomaly(True) sits.
    if prep.config.section(DebugConfig).detect_anomaly is False:
        anomaly_off()


def _nocode_first_step(values: dict[str, Any], optimizer: torch.optim.Optimizer, notes: list[str]) -> None:
    # At the first optimizer step, not at start: the script turns it on in its set-up, after
    # the applier is installed.
    if values.get("detect_anomaly") is not False:
        return
    # Called again at each step of an optimizer that keeps no state (SGD without momentum):
    # it is turned off each time, and said once.
    said = anomaly_off() or "autograd's anomaly detection was already off at the first optimizer step"
    if not notes:
        notes.append(said)


def _propose(incumbent: Overlay, ctx: TuneContext) -> list[Overlay]:
    return [_off()] if ctx.seen(DebugFacts).anomaly else []


def _switchable(change: Overlay) -> bool:
    return change == _off()


def _spell(section: DebugConfig) -> FrameworkSpelling:
    if section.detect_anomaly is not False:
        return FrameworkSpelling()
    # Lightning's Trainer(detect_anomaly=False) is its default and leaves a torch call's switch on.
    return FrameworkSpelling(code=("torch.autograd.set_detect_anomaly(False)  # after the script's own set-up",))


def quick_switch(ctx: ProbeContext) -> QuickSwitch | None:
    """Anomaly detection off for a step and on again, as the script had it (its ``check_nan``
    too); None when it is off."""
    if not torch.is_anomaly_enabled():
        return None
    check_nan = torch.is_anomaly_check_nan_enabled()
    return QuickSwitch("debug.anomaly", "anomaly detection off", on=lambda: torch.set_anomaly_enabled(False),
                       off=lambda: torch.set_anomaly_enabled(True, check_nan), setting=_off().to_dict())


_RULES = {"debug.anomaly": anomaly_on, "debug.profiler": profiler_on, "debug.tracer": tracer_on,
          "debug.launch_blocking": launch_blocking_on, "debug.deterministic": deterministic_on,
          "debug.cpp_stacktraces": cpp_stacktraces_on, "debug.dev_mode": dev_mode_on,
          "debug.torch_logs": torch_logs_on}

TECHNIQUE = Technique(
    name="debug",
    title="debug switches left on",
    after=("cpu",),
    placed="a process-wide switch, turned off with the others before the model is touched",
    section=DebugConfig,
    resolve=_resolve,
    apply=_apply,
    nocode=NoCode(at_first_step=_nocode_first_step),
    levers=(Lever("debug", "anomaly detection off (debug)", Parity.EXACT, _propose, ("debug.anomaly",),
                  priority=32, probed_by="debug.anomaly", switchable=_switchable),),
    spell=_spell,
    facts=DebugFacts,
    probe=probe_debug,
    rules=tuple(Rule(fid, check, example=EXAMPLES[fid]) for fid, check in _RULES.items()),
    quick_probe=quick_switch,
)
