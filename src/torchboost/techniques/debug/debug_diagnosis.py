"""The debug switches' findings: one rule per switch left on, its fix in the script's words.

Each rule reads :class:`~torchboost.techniques.debug.debug_facts.DebugFacts` and fires
when its switch is on (the GPU-only ones on a CUDA run alone); its advice names the line
to remove or guard, the script's own where its files hold it. None of them estimates a
figure: what a switch costs is the script's own (anomaly detection keeps a traceback for
every op its forward records; a tracer runs on every line of Python), so the one that can
be turned off between steps, anomaly detection, is measured by the doctor's quick probe
(its finding is ranked by that ratio), and the others say what is on and what to change,
with ``expected_speedup`` 1.0 and no number invented for them.
"""

from __future__ import annotations

from torchboost.config import Overlay
from torchboost.evidence.findings import Evidence, Finding
from torchboost.evidence.observed import Facts, StepRecord
from torchboost.evidence.rulekit import view
from torchboost.techniques.debug.debug_facts import CPP_STACKTRACES, DEV_MODE, LAUNCH_BLOCKING, TORCH_LOGS, DebugFacts
from torchboost.techniques.debug.debug_settings import DebugConfig

__all__ = ["anomaly_on", "cpp_stacktraces_on", "deterministic_on", "dev_mode_on", "launch_blocking_on", "profiler_on",
           "torch_logs_on", "tracer_on", "EXAMPLES"]

_NOT_ESTIMATED = "not estimated"


def _where(seen: DebugFacts, name: str, default: str, flag: str = "debug") -> tuple[str, str]:
    """(the line that turned switch ``name`` on, with where the script's files hold it; that
    line guarded by the script's own ``--<flag>``); ``default`` where no file of the
    script's holds it."""
    found = seen.lines.get(name, "")
    place, _, code = found.partition(": ")
    code = code or default
    return (f"{code} ({place})" if found else code), f"if args.{flag}:  # a --{flag} flag of the script's own\n    {code}"


def _line(seen: DebugFacts, name: str) -> str:
    """The line that turned switch ``name`` on, as :func:`_where` words it; "": none found."""
    return _where(seen, name, "")[0] if seen.lines.get(name) else ""


def _finding(fid: str, title: str, evidence: Evidence, advice: str, code: str, formula: str, notes: list[str],
             fix: Overlay = Overlay()) -> Finding:
    return Finding(id=fid, title=title, evidence=evidence, fix=fix, advice=advice, advice_code=code,
                   expected_speedup=1.0, formula=formula, notes=notes)


def anomaly_on(facts: Facts) -> Finding | None:
    """Autograd's anomaly detection is on: every op the forward records keeps a Python
    traceback for its backward, and with ``check_nan`` every backward output is checked."""
    seen = facts.seen(DebugFacts)
    if not seen.anomaly:
        return None
    line, guarded = _where(seen, "anomaly", "torch.autograd.set_detect_anomaly(True)")
    return _finding(
        "debug.anomaly",
        f"Autograd's anomaly detection is on{' (with check_nan)' if seen.anomaly_check_nan else ''}: "
        "a debugging switch that slows every step",
        {"anomaly_detection": "on", "check_nan": str(seen.anomaly_check_nan).lower(),
         **({"line": line} if seen.lines.get("anomaly") else {})},
        f"remove {line} or guard it behind a --debug flag; until then, [debug] detect_anomaly = false turns it off "
        "after the script's set-up (the Booster's prepare; torchboost run at the first optimizer step)",
        guarded,
        f"{_NOT_ESTIMATED}: its cost is the number of ops the forward records, times a traceback each (and a NaN "
        "check of every backward output with check_nan); the doctor's quick probe times steps with it off "
        "against steps with it on",
        ["Anomaly detection changes no maths: the losses are the same with it off.",
         "Keep it for the one run that looks for where a NaN first appears."],
        fix=Overlay.of(DebugConfig, detect_anomaly=False),
    )


def profiler_on(facts: Facts) -> Finding | None:
    """The autograd profiler (``torch.profiler.profile``, ``emit_nvtx``, ``emit_itt``) is
    recording while the script trains: every op is timed and kept."""
    seen = facts.seen(DebugFacts)
    if not seen.profiler:
        return None
    words = {"nvtx": "torch.autograd.profiler.emit_nvtx()", "itt": "torch.autograd.profiler.emit_itt()"}
    line, _ = _where(seen, "profiler", words.get(seen.profiler, "torch.profiler.profile(...)"))
    return _finding(
        "debug.profiler",
        f"The autograd profiler ({seen.profiler}) records every op while the script trains",
        {"profiler": seen.profiler, **({"line": line} if seen.lines.get("profiler") else {})},
        f"remove {line}, or give it a schedule so that it records a few steps and then stops",
        "with torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1)) as prof:\n"
        "    for x, y in loader:\n        ...\n        prof.step()  # records 3 steps, then stops",
        f"{_NOT_ESTIMATED}: its cost is per op and cannot be switched off from outside the script's profile",
        ["The doctor's own profiler window is not this one: it runs after the switches are read, "
         "and its trace is in the report."],
    )


def tracer_on(facts: Facts) -> Finding | None:
    """A trace or profile function (a debugger, a coverage tool) runs on every line or call
    of the script's Python."""
    seen = facts.seen(DebugFacts)
    if not seen.tracer:
        return None
    line = _line(seen, "tracer")
    return _finding(
        "debug.tracer",
        f"A debugger or coverage tracer ({seen.tracer}) runs on every line of the script's Python",
        {"tracer": seen.tracer, **({"line": line} if line else {})},
        (f"remove {line}" if line else "run the script without the debugger or coverage tool") +
        "; time and tune it as it will run",
        "python train.py  # not under a debugger, coverage run or an IDE's debug mode",
        f"{_NOT_ESTIMATED}: its cost is per line of Python run, which the profile does not count",
        ["Host-bound steps (small models, Python-heavy loops) slow the most."],
    )


def launch_blocking_on(facts: Facts) -> Finding | None:
    """On a CUDA run ``CUDA_LAUNCH_BLOCKING=1``: every kernel launch waits for the kernel, so
    the host never queues work ahead of the GPU."""
    seen = facts.seen(DebugFacts)
    if view(facts).device != "cuda" or not seen.launch_blocking:
        return None
    line = _line(seen, "launch_blocking")
    return _finding(
        "debug.launch_blocking",
        f"{LAUNCH_BLOCKING}=1: every CUDA kernel launch waits for the kernel to finish",
        {"launch_blocking": "1", **({"line": line} if line else {})},
        (f"remove {line}" if line else f"unset {LAUNCH_BLOCKING} in the shell that starts the run") +
        "; it is for locating a CUDA error, one run",
        f"unset {LAUNCH_BLOCKING}  # in the shell, before the run",
        f"{_NOT_ESTIMATED}: it costs what the host and the GPU would have overlapped, unknown while they are serialised",
        ["Set in the environment, it cannot be switched within the running process."],
    )


def deterministic_on(facts: Facts) -> Finding | None:
    """On a CUDA run ``torch.use_deterministic_algorithms(True)`` or
    ``torch.backends.cudnn.deterministic``: the slower deterministic kernels are used."""
    seen = facts.seen(DebugFacts)
    if view(facts).device != "cuda" or not (seen.deterministic or seen.cudnn_deterministic):
        return None
    names = [n for n, on in (("deterministic", seen.deterministic), ("cudnn_deterministic", seen.cudnn_deterministic))
             if on]
    defaults = {"deterministic": "torch.use_deterministic_algorithms(True)",
                "cudnn_deterministic": "torch.backends.cudnn.deterministic = True"}
    lines = [_where(seen, n, defaults[n], flag="reproducible") for n in names]
    return _finding(
        "debug.deterministic",
        "Deterministic algorithms are forced on the GPU: " + " and ".join(defaults[n] for n in names),
        {"deterministic_algorithms": str(seen.deterministic).lower(),
         "cudnn_deterministic": str(seen.cudnn_deterministic).lower()},
        "remove " + " and ".join(line for line, _ in lines) + f", or guard {'them' if len(lines) > 1 else 'it'} "
        "behind a --reproducible flag, unless bit-for-bit repeatable runs are what this run needs",
        "\n".join(guarded for _, guarded in lines),
        f"{_NOT_ESTIMATED}: what it costs depends on which kernels have a faster non-deterministic twin "
        "(scatter/index_add backward, cuDNN's convolution algorithms)",
        ["cudnn.benchmark is another setting ([cudnn] benchmark): the autotuner, not this."],
    )


def cpp_stacktraces_on(facts: Facts) -> Finding | None:
    """``TORCH_SHOW_CPP_STACKTRACES=1``: every error torch raises collects its C++ stack."""
    seen = facts.seen(DebugFacts)
    if not seen.cpp_stacktraces:
        return None
    line = _line(seen, "cpp_stacktraces")
    return _finding(
        "debug.cpp_stacktraces",
        f"{CPP_STACKTRACES}=1: every error torch raises collects its C++ stack",
        {"cpp_stacktraces": "1", **({"line": line} if line else {})},
        (f"remove {line}" if line else f"unset {CPP_STACKTRACES} in the shell that starts the run") +
        "; it is for reading one error's C++ stack",
        f"unset {CPP_STACKTRACES}  # in the shell, before the run",
        f"{_NOT_ESTIMATED}: it costs only where torch raises and catches errors (torch.compile's tracing among "
        "them), which the steps do not count",
        ["A step that raises nothing does not pay for it."],
    )


def dev_mode_on(facts: Facts) -> Finding | None:
    """Python's dev mode (``-X dev``, ``PYTHONDEVMODE``): debug hooks on Python's memory
    allocators and extra runtime checks in the script's process."""
    seen = facts.seen(DebugFacts)
    if not seen.dev_mode:
        return None
    unset = "run python without -X dev" if seen.dev_mode == "-X dev" else f"unset {DEV_MODE}"
    return _finding(
        "debug.dev_mode",
        f"Python's dev mode is on ({seen.dev_mode}): debug hooks on every allocation of Python objects",
        {"dev_mode": seen.dev_mode},
        f"{unset}; dev mode is for finding a warning's or a resource leak's origin",
        "python train.py  # without -X dev, with PYTHONDEVMODE unset",
        f"{_NOT_ESTIMATED}: its cost is per Python allocation, which the profile does not count",
        ["Set when Python starts: it cannot be switched within the running process."],
    )


def torch_logs_on(facts: Facts) -> Finding | None:
    """``TORCH_LOGS`` (or ``torch._logging.set_logs``) makes torch log below WARNING."""
    seen = facts.seen(DebugFacts)
    if not seen.torch_logs:
        return None
    line = _line(seen, "torch_logs")
    from_env = seen.torch_logs.startswith(f"{TORCH_LOGS}=")
    return _finding(
        "debug.torch_logs",
        f"torch's logging is turned up ({seen.torch_logs})",
        {"torch_logs": seen.torch_logs, **({"line": line} if line else {})},
        (f"remove {line}" if line else f"unset {TORCH_LOGS}" if from_env else "remove the torch._logging.set_logs call")
        + "; verbose logs are for one run that looks at a compile",
        f"unset {TORCH_LOGS}  # in the shell, before the run" if from_env
        else "torch._logging.set_logs()  # torch's own levels again, or no set_logs call at all",
        f"{_NOT_ESTIMATED}: what it costs is what torch writes, most of it while torch.compile traces and recompiles",
        ["Set at import: it cannot be switched within the running process."],
    )


def _example(**seen: object) -> Facts:
    """A step of the MLP as timed with anomaly detection off (one run had it 2.7x faster than
    with it on), with ``seen`` debug facts."""
    steps = [StepRecord(i, 18.0, 0.5, 8.0, 8.5, 1.0) for i in range(6)]
    device = "cuda" if seen.pop("cuda", False) else "cpu"
    return Facts(env={"device": device, "cpu_cores": 2}, steps=steps, techniques={"debug": DebugFacts(**seen)})


EXAMPLES = {
    "debug.anomaly": lambda: _example(anomaly=True, anomaly_check_nan=True,
                                      lines={"anomaly": "train.py line 3: torch.autograd.set_detect_anomaly(True)"}),
    "debug.profiler": lambda: _example(profiler="kineto"),
    "debug.tracer": lambda: _example(tracer="coverage.CTracer"),
    "debug.launch_blocking": lambda: _example(cuda=True, launch_blocking=True),
    "debug.deterministic": lambda: _example(cuda=True, deterministic=True, cudnn_deterministic=True),
    "debug.cpp_stacktraces": lambda: _example(cpp_stacktraces=True),
    "debug.dev_mode": lambda: _example(dev_mode="-X dev"),
    "debug.torch_logs": lambda: _example(torch_logs="TORCH_LOGS=+dynamo"),
}
"""Facts each rule fires on, by finding id (the registry's ``Rule.example``)."""
