"""The doctor for a training loop in this very process: ``torchboost.doctor(train)`` in a notebook.

``torchboost doctor -- python train.py`` needs a script to run. In Jupyter the loop is a
function of a cell, in the kernel's own process, so::

    report = torchboost.doctor(train, model, loader, steps=20)   # calls train(model, loader)
    report                                                        # shows itself (its HTML)

calls the function with the command's hooks, window and probes installed
(:func:`~torchboost.observe.child.here.observe_call`): the same warm-up, recorded steps,
profiler window, replay of batches, FLOP count and in-process quick switches (bf16
autocast, threads, the fused optimizer, bf16 math, debug switches left on), each timed
against plain steps as the doctor times them. Where the command would stop the script,
the loop is stopped instead: ``StopObserving`` (a ``SystemExit``, so the loop's ``except
Exception`` lets it by and its ``finally`` blocks run) is raised at that step boundary
and caught here; the function's later steps do not run, and calling it again trains on
from where the model is. Everything installed is taken off again, and every setting a
probe switched is put back. The report is written to ``out`` as the command writes it
(report.json, .md, .html, the trace) and returned: :class:`DoctorReport`, which Jupyter
shows as its HTML and a terminal prints as the command's tables.

Unlike the command, the loop runs in your own process: what it writes is written (as under
``doctor --full``) and no stall ends it (interrupt the kernel). Keyword arguments other
than ``steps``, ``warmup`` and ``out`` go to the function; a function that takes one of
those names itself is given it through ``functools.partial``.
"""

from __future__ import annotations

import html
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rich.console import Console

from torchboost import out_folder
from torchboost.diagnose import diagnose
from torchboost.diagnose.headroom import Headroom, cap_findings, measured_headroom
from torchboost.env import LoadMeter, tree_cpu_s
from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts
from torchboost.evidence.steps import warmup_only_words
from torchboost.observe.child.here import observe_call
from torchboost.observe.parent.request import RunRequest, doctor_bounds
from torchboost.observe.spec import ObserveSpec
from torchboost.report.doctor_report import build_report, print_doctor_report, write_doctor_report
from torchboost.report.limits_text import shared_run_words

__all__ = ["DoctorReport", "NothingToDiagnose", "doctor"]

REPORT_WIDTH = 100
"""Characters per line of the report's text (:attr:`DoctorReport.text`)."""

WRITES_LINE = "the loop ran in this process: what it wrote stays where it wrote it"
"""The report's line on the loop's writes: nothing is kept apart in the user's own process."""


class NothingToDiagnose(RuntimeError):
    """The function recorded no training step (it never stepped, or stopped within warm-up)."""


@dataclass(frozen=True)
class DoctorReport:
    """What :func:`doctor` observed and diagnosed: the command's report, as data and text."""

    facts: Facts
    """Everything observed (:class:`~torchboost.evidence.observed.Facts`)."""
    findings: list[Finding]
    """The findings, ranked by measured (else expected) speedup, capped by the headroom."""
    headroom: Headroom | None
    """The step against this machine's measured peak; None when the probe failed."""
    paths: dict[str, Path]
    """The report files: {"json", "md", "html"}."""
    report: dict[str, Any] = field(repr=False)
    """The report.json document (its schema: :mod:`torchboost.report.doctor_report`)."""
    text: str = field(repr=False)
    """The report as the command prints it, in plain text."""
    result: Any = field(default=None, repr=False)
    """The function's return value when it ended before the doctor stopped it."""

    @property
    def steps(self) -> int:
        """Steps recorded (warm-up excluded)."""
        return int(self.report["steps_observed"])

    @property
    def breakdown_pct(self) -> dict[str, float]:
        """Each phase's share of the step, percent: data, forward, backward, optimizer, other."""
        return dict(self.report["breakdown_pct"])

    @property
    def top_finding(self) -> str | None:
        """The id of the first-ranked finding; None when there is none."""
        return self.report["findings"][0]["id"] if self.report["findings"] else None

    def _repr_html_(self) -> str:
        """Jupyter's view: report.html, in a frame of its own so its styles stay in it."""
        page = self.paths["html"].read_text(encoding="utf-8")
        return (f'<iframe srcdoc="{html.escape(page, quote=True)}" title="torchboost doctor" '
                'style="width: 100%; height: 720px; border: 0"></iframe>')

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:  # a terminal's REPL shows the report, not the fields
        return self.text


def doctor(fn: Callable[..., Any], *args: Any, steps: int | None = None, warmup: int | None = None,
           out: str | Path = "torchboost-doctor", **kwargs: Any) -> DoctorReport:
    """Call ``fn(*args, **kwargs)`` observed, as ``torchboost doctor`` observes a script, in
    this process; stop its loop after the steps (``steps`` recorded after ``warmup``, each
    exactly when given, else as the command decides: at most 20 after at most 5), diagnose,
    write the report to ``out`` and return it (see the module docstring). Raises
    :class:`NothingToDiagnose` when no step was recorded, and the function's own exception
    (after the observer is off) when it raised one; TypeError or ValueError, naming the
    argument, for a ``fn`` that cannot be called or counts that cannot be, and a
    :class:`~torchboost.usage.UsageError` (a ValueError) for an ``out`` folder that holds
    files torchboost did not write."""
    _check_arguments(fn, steps, warmup)
    out_folder.claim(out, "out")  # new, empty or torchboost's: a folder of the user's is refused
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    request = RunRequest(command=[f"torchboost.doctor({name})"], out_dir=out, stall_timeout_s=None,
                         **doctor_bounds(steps, warmup))
    spec = ObserveSpec(out_dir=str(Path(out).resolve()), **request.spec_fields())
    load = LoadMeter(own=tree_cpu_s)  # what a neighbour took from the figures
    load.start()
    with out_folder.in_use(out):
        observed = observe_call(fn, args, kwargs, spec)
        shared = shared_run_words(load.stop())
        facts = observed.facts
        if not facts.steps:
            raise NothingToDiagnose(_no_steps_words(facts, observed.ended))
        return _report(facts, spec, shared, observed.result)


def _check_arguments(fn: Any, steps: Any, warmup: Any) -> None:
    """What the command's parser says of its flags, in this call's own words."""
    if not callable(fn):
        raise TypeError(f"torchboost.doctor(fn, *args): fn must be the function that trains (it calls "
                        f"fn(*args, **kwargs)); got {type(fn).__name__} {fn!r:.60}")
    for name, value, least in (("steps", steps, 1), ("warmup", warmup, 0)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"torchboost.doctor(..., {name}=): a whole number of steps; got {value!r:.60}")
        if value < least:
            raise ValueError(f"torchboost.doctor(..., {name}={value}): at least {least}")


def _no_steps_words(facts: Facts, ended: str) -> str:
    if facts.steps_seen:
        words = warmup_only_words(facts.steps_seen, facts.warmup_steps)
        return "torchboost.doctor: " + words.replace("Lower --warmup", "Lower warmup=")
    return (f"torchboost.doctor: no training step seen (the function {ended}): it never called optimizer.step() "
            "or loss.backward(). Give it a function that trains (a loop with a backward and an optimizer step)")


def _report(facts: Facts, spec: ObserveSpec, shared: str | None, result: Any) -> DoctorReport:
    """Diagnose ``facts`` and write and render the report, as the command does."""
    try:
        headroom: Headroom | None = measured_headroom(facts, shared)
    except Exception:  # noqa: BLE001 - the report goes without it, as the command's does
        headroom = None
    findings = cap_findings(diagnose(facts), headroom)
    writes = {"line": WRITES_LINE}
    paths = write_doctor_report(facts, findings, Path(spec.out_dir), None, headroom, writes)
    console = Console(file=io.StringIO(), width=REPORT_WIDTH, record=True, color_system=None, force_jupyter=False)
    print_doctor_report(facts, findings, console, paths, None, headroom, writes)
    return DoctorReport(facts=facts, findings=findings, headroom=headroom, paths=paths,
                        report=build_report(facts, findings, None, headroom, writes),
                        text=console.export_text(), result=result)
