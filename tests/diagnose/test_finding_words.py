"""Every finding's words against its facts: a figure worded "measured" is one the run measured.

Each rule fires on its example Facts (``test_fixes.EXAMPLES``), with and without a quick
probe's measurement, and the finding is rendered as the doctor renders it: report.json's
entry, the Markdown report, the HTML report and the terminal. In every text, a clause that
says "measured" (or "not estimated") may hold only figures found in the run's report data
(facts, step statistics, evidence, the probe's measurement), never the finding's own
estimate nor a constant; an estimate carries its arithmetic, down to the figure it gives,
and is labelled one. The twins are a finding that claims a measure its facts lack, and the
compile finding's former wording of fixed CPU gains as "measured on CPUs, not estimated":
the same check flags both.
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
from typing import Any, Iterator

import pytest
from rich.console import Console

from test_fixes import EXAMPLES
from torchboost.diagnose.measured import ranked, with_measured
from torchboost.diagnose.rules import RULES
from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts, QuickProbeFacts
from torchboost.report import _format as fmt
from torchboost.report.doctor_report import build_report
from torchboost.report.html import render_html
from torchboost.report.markdown import render_markdown
from torchboost.report.terminal import print_report

# -- the check ---------------------------------------------------------------------------------

_CLAIM = re.compile(r"\bmeasured\b(?! steps?\b)|\bnot estimated\b", re.IGNORECASE)
"""Words that say a figure was measured in this run ("the measured steps" names the steps
recorded after the warm-up, and claims no figure)."""

_NEGATION = re.compile(r"\b(?:not|never|nothing|none)\s+(?:yet\s+)?$", re.IGNORECASE)
"""Words before "measured" that say the opposite ("not measured here", "never measured")."""

_CLAUSE_END = re.compile(r"[;()\n\[\]]|,\s|\.\s|\.$| \u2014 |: no measurement")
"""Where a clause ends: a figure worded measured must sit in the clause that says so."""

_NUMBER = re.compile(r"(?<![\w.\-/])(\d+(?:\.\d+)?)(?![\w.]*\.(?:md|py|json)\b)")
"""A figure: digits not part of a name (bf16, fp32, avx512), a path or a version."""

_ESTIMATE_KEYS = frozenset({"expected_speedup", "memory_ratio", "formula", "notes", "title", "fix"})
"""Report keys whose numbers are the finding's own estimate or words, not what the run measured."""


def run_figures(report: Any, skip: frozenset[str] = _ESTIMATE_KEYS) -> set[float]:
    """Every number in a doctor report's data (facts, statistics, evidence, the probe's
    measurement), less the findings' estimates and words; list lengths count as figures too."""
    found: set[float] = set()
    if isinstance(report, bool) or report is None:
        return found
    if isinstance(report, (int, float)):
        return {float(report)}
    if isinstance(report, dict):
        for key, value in report.items():
            if key not in skip:
                found |= run_figures(value, skip)
    elif isinstance(report, (list, tuple)):
        found.add(float(len(report)))
        for value in report:
            found |= run_figures(value, skip)
    return found


def _matches(figure: str, known: set[float]) -> bool:
    """``figure`` as printed is one of ``known``, rounded to its digits, as a percentage or
    fraction of it, or its inverse (a speedup printed from a time ratio)."""
    value = float(figure)
    half = 0.5 * 10.0 ** -(len(figure.split(".")[1]) if "." in figure else 0) + 1e-9
    for v in known:
        candidates = (v, 100.0 * v, v / 100.0) + ((1.0 / v,) if v else ())
        if any(abs(c - value) <= half for c in candidates):
            return True
    return False


def _clauses(text: str) -> list[str]:
    """``text`` cut at clause ends; a clause that is only "measured" (a figure's "(measured)")
    is joined to the clause before it, which holds the figure."""
    out: list[str] = []
    for part in _CLAUSE_END.split(text):
        part = part.strip().lstrip("-\u2022* ")  # a list's bullet
        if part.lower() == "measured" and out:
            out[-1] = f"{out[-1]} (measured)"
        elif part:
            out.append(part)
    return out


def unbacked_figures(text: str, known: set[float]) -> list[str]:
    """The figures ``text`` words as measured that are none of ``known`` (the run's figures):
    each as "figure in: clause". Empty when every measured figure is the run's own."""
    text = re.sub(r"(?<![\w.])x(?=\d)", "", text)  # "x1.61" is the figure 1.61
    bad = []
    for clause in _clauses(text):
        claims = [m for m in _CLAIM.finditer(clause) if not _NEGATION.search(clause[:m.start()])]
        if not claims:
            continue
        bad += [f"{n} in: {clause}" for n in _NUMBER.findall(clause) if not _matches(n, known)]
    return bad


def estimate_problems(entry: dict[str, Any]) -> list[str]:
    """A report finding whose gain is an estimate: its arithmetic ends at the figure it gives
    (the expected speedup, to two or three places, written after an "="), and the gain
    printed beside it says "est." unless the doctor measured it."""
    speedup = entry["expected_speedup"]
    if entry.get("blocking") or not fmt.estimated(speedup):
        return []
    problems = []
    shown = {f"{speedup:.2f}", f"{speedup:.3f}"}
    results = re.findall(r"=\s*x?(\d+(?:\.\d+)?)", entry["formula"])
    if not shown & set(results):
        problems.append(f"{entry['id']}: its arithmetic does not give {speedup:.3f}: {entry['formula']}")
    if not entry.get("measured") and "est." not in fmt.gain(entry):
        problems.append(f"{entry['id']}: an estimate printed as {fmt.gain(entry)!r}")
    return problems


# -- the texts the doctor prints ---------------------------------------------------------------

@pytest.fixture(autouse=True)
def _no_plots(monkeypatch):
    """The HTML page's plots are pictures, not words: left out, the page renders in milliseconds."""
    import torchboost.report.html as page

    monkeypatch.setattr(page, "breakdown_png", lambda *a, **k: b"")
    monkeypatch.setattr(page, "timeline_png", lambda *a, **k: b"")


def _entries(report: dict[str, Any]) -> list[dict[str, Any]]:
    return report["findings"] + report["training_changes"] + report["memory_fixes"]


def _json_texts(entry: dict[str, Any]) -> Iterator[str]:
    yield entry["title"]
    yield entry["formula"]
    yield from entry["notes"]
    yield fmt.gain(entry)


def _terminal(report: dict[str, Any]) -> str:
    console = Console(record=True, width=400, color_system=None)
    print_report(report, console, {})
    return console.export_text()


def _html_text(report: dict[str, Any], facts: Facts) -> str:
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", render_html(report, facts.steps), flags=re.S)
    page = re.sub(r'src="data:[^"]*"', "", page)
    return html.unescape(re.sub(r"<[^>]+>", "\n", page))


def rendered(facts: Facts, finding: Finding) -> tuple[dict[str, Any], dict[str, str]]:
    """The report data of ``finding`` on ``facts``, and its texts by where they are printed."""
    report = build_report(facts, [finding])
    (entry,) = _entries(report)
    texts = {"json": "\n".join(_json_texts(entry)), "markdown": render_markdown(report),
             "html": _html_text(report, facts), "terminal": _terminal(report)}
    return report, texts


def _probed(facts: Facts, finding_id: str) -> Facts:
    """``facts`` with a quick probe of ``finding_id``: 3 pairs, 80 ms plain against 50 ms switched."""
    probe = QuickProbeFacts(finding_id, f"{finding_id} on", plain_ms=[80.0, 81.0, 79.0],
                            switched_ms=[50.0, 51.0, 49.0], warmup_ms=1.0)
    return dataclasses.replace(facts, quick_probes=[*facts.quick_probes, probe])


def _finding(rule_id: str, probed: bool) -> tuple[Facts, Finding]:
    facts = EXAMPLES[rule_id]()
    if probed:
        facts = _probed(facts, rule_id)
    finding = RULES[rule_id](facts)
    assert finding is not None and finding.id == rule_id
    (finding,) = ranked(with_measured([finding], facts))
    return facts, finding


# -- every rule's finding ----------------------------------------------------------------------

@pytest.mark.parametrize("probed", [False, True], ids=["estimated", "probed"])
@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_every_figure_worded_measured_is_the_run_s(rule_id, probed):
    facts, finding = _finding(rule_id, probed)
    report, texts = rendered(facts, finding)
    known = run_figures(report)
    assert {where: bad for where, text in texts.items() if (bad := unbacked_figures(text, known))} == {}
    assert estimate_problems(_entries(report)[0]) == []
    if probed and not finding.blocking:  # the probe's figure is in the texts, worded measured
        shown = ("json", "markdown", "html") + (("terminal",) if report["findings"] else ())
        assert [where for where in shown if not re.search(r"measured[^;]*x1\.60", texts[where])] == []


def test_the_compile_finding_on_a_cpu_is_an_estimate_with_its_source():
    facts, finding = _finding("compile.enable", probed=False)
    report, texts = rendered(facts, finding)
    assert finding.formula.startswith("estimate, not measured here: median(")
    assert "benchmarks/RESULTS.md" in finding.formula
    assert "1.04 rough est." in texts["terminal"] and "not estimated" not in texts["terminal"]
    assert all("measured on CPUs" not in text for text in texts.values())


# -- the twins: words that claim a measure the facts lack --------------------------------------

def test_twin_a_finding_claiming_a_measure_its_facts_lack_is_flagged():
    facts, honest = _finding("threads.oversubscribed", probed=False)
    claimed = dataclasses.replace(honest, notes=[*honest.notes, "oversubscribed cores measured 1.4x slower"])
    report, texts = rendered(facts, claimed)
    known = run_figures(report)
    for where in ("json", "markdown", "html"):
        assert unbacked_figures(texts[where], known) == ["1.4 in: oversubscribed cores measured 1.4x slower"], where
    # the same figure worded as what it is passes
    assert unbacked_figures("oversubscribed cores ran 1.4x slower in one run (not measured here)", known) == []


def test_twin_fixed_compile_gains_worded_measured_are_flagged():
    """The compile finding's wording before: a fixed median of recorded gains called measured."""
    facts, finding = _finding("compile.enable", probed=False)
    old = ("measured on CPUs, not estimated: the median gain of seven shapes = 1.040, from 0.83x to 1.21x a "
           "step (benchmarks/RESULTS.md); ranked by the median, repaid at the best")
    report, texts = rendered(facts, dataclasses.replace(finding, formula=old))
    flagged = unbacked_figures(texts["json"], run_figures(report))
    assert [f.split(" in: ")[0] for f in flagged] == ["1.040"]
    assert unbacked_figures(texts["markdown"], run_figures(report))  # the report says it too
    # the finding's estimate is not a figure of the run: worded measured, it is flagged
    assert unbacked_figures(f"measured x{finding.expected_speedup:.2f}", run_figures(report))


def test_twin_an_estimate_without_its_arithmetic_is_flagged():
    facts, finding = _finding("optimizer.fused", probed=False)
    report, _ = rendered(facts, dataclasses.replace(finding, formula="fused kernels are faster (assumed)"))
    (entry,) = _entries(report)
    assert len(estimate_problems(entry)) == 1
    assert estimate_problems({**entry, "formula": finding.formula}) == []


def test_the_check_reads_the_run_s_figures_from_the_report_not_the_estimate():
    facts, finding = _finding("optimizer.fused", probed=True)
    report = build_report(facts, [finding])
    known = run_figures(report)
    assert 1.6 in {round(v, 2) for v in known}  # the probe's ratio, 80 / 50
    assert not _matches(f"{finding.expected_speedup:.3f}", run_figures({"expected_speedup": finding.expected_speedup}))
    assert json.loads(json.dumps(report))["findings"][0]["measured"]["ratio"] == finding.measured.ratio
