"""The quick probes' measurements on the findings they switched, and the ranking that reads them.

The doctor times a few steps with each switchable finding's fix turned on against plain
steps, interleaved (:mod:`torchboost.observe.probes.quick`). Each such finding carries the
measured ratio beside its estimate (:class:`~torchboost.evidence.findings.Measured`) and is
ranked by it; one measured slower than plain says so and ranks last among the speedups
(tune can leave it untried). A probe that failed (an exception, a non-finite loss) leaves
the finding estimated only, with a note saying why.
"""

from __future__ import annotations

import dataclasses

from torchboost.evidence.findings import Finding, Measured
from torchboost.evidence.observed import Facts

__all__ = ["with_measured", "ranked"]


def _measured_note(measured: Measured, estimate: float) -> str:
    # 1.0 is no estimate: the finding has no figure of its own (no rule fires for no gain).
    guessed = estimate != 1.0
    if not measured.agree:
        return (f"{measured.words()} ({measured.label} against plain steps, interleaved; another process "
                f"slowed some steps many times over); " +
                (f"ranked by its estimate, x{estimate:.2f}" if guessed else "not estimated: ranked as no gain"))
    if measured.hopeless:
        return (f"{measured.words()} ({measured.label} against plain steps, interleaved): slower than the "
                f"script as it is{f', where x{estimate:.2f} was estimated' if guessed else ''}; ranked last")
    return (f"{measured.words()} ({measured.label} against plain steps, interleaved; "
            f"{f'estimated x{estimate:.2f}' if guessed else 'not estimated'}); ranked by the measurement")


def with_measured(findings: list[Finding], facts: Facts) -> list[Finding]:
    """``findings`` with each quick probe's measurement on the finding it switched (its
    ``measured`` and a note), or the probe's failure in its notes; the others unchanged."""
    probes = {p.finding_id: p for p in facts.quick_probes}
    out = []
    for f in findings:
        probe = probes.get(f.id)
        if probe is not None and probe.ratio is not None:
            measured = Measured.of(probe)
            title = f"{f.title} (measured slower here)" if measured.hopeless else f.title
            f = dataclasses.replace(f, measured=measured, title=title, severity="",
                                    notes=[*f.notes, _measured_note(measured, f.expected_speedup)])
        elif probe is not None and probe.error:
            f = dataclasses.replace(f, notes=[*f.notes, f"not measured: the quick probe of {probe.label} "
                                                          f"{probe.error}"])
        out.append(f)
    return out


def ranked(findings: list[Finding]) -> list[Finding]:
    """Blocking findings first, then by measured ratio or estimate, largest first; a finding
    measured slower than plain last. Ties keep their order."""
    return sorted(findings, key=lambda f: (not f.blocking, bool(f.measured and f.measured.hopeless),
                                           -f.rank_speedup))
