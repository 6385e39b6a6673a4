"""Output sent to a file or a pipe keeps whole lines; a terminal still gets them wrapped."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from rich.console import Console

from torchboost.cli._console import console
from torchboost.report.doctor_report import print_doctor_report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
from _report_helpers import data_bound_facts, findings_for  # noqa: E402

NOTE = "Expected speedups are estimates for one change at a time and do not multiply exactly"


def _printed(out: Console) -> str:
    facts = data_bound_facts()
    print_doctor_report(facts, findings_for(facts), out, {"json": Path("report.json")})
    return out.file.getvalue()


def test_a_pipe_gets_whole_lines():
    text = _printed(console(file=io.StringIO()))
    assert any(NOTE in line for line in text.splitlines())  # the long note is one line
    assert "[loader]" in text


def test_the_twin_a_plain_console_wraps_the_note():
    text = _printed(Console(file=io.StringIO(), width=80))
    assert not any(NOTE in line for line in text.splitlines())  # the check can fail


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_still_wraps():
    assert console(file=io.StringIO()).soft_wrap and not console(file=_Tty()).soft_wrap
