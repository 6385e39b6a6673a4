"""Every table in benchmarks/RESULTS.md says on what machine, on what day and by what command
it was measured, so that a figure can be traced and rerun."""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "RESULTS.md"

_TABLE = re.compile(r"(?m)^\|.*\|[ \t]*\n\|[ \t]*:?-{3}")
_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
_MACHINE = re.compile(r"\bMachine\b|\blscpu\b")
_COMMAND = re.compile(r"```|`(?:[A-Z_]+=\S+ )*(?:python|torchboost|bash|time|git|accelerate|torchrun) [^`]+`")


def unnamed_tables(text: str) -> list[str]:
    """``heading: what is missing`` for each ``##`` section that holds a table but does not name
    its date, its machine (a ``Machine`` line, or ``lscpu``) and its command (a code block or
    a quoted command line). A section that describes a machine needs no command."""
    missing = []
    for section in re.split(r"(?m)^## ", text)[1:]:
        heading = section.splitlines()[0]
        if not _TABLE.search(section):
            continue
        lacks = [what for what, pattern in (("date", _DATE), ("machine", _MACHINE), ("command", _COMMAND))
                 if not pattern.search(section) and not (what == "command" and heading.startswith("Machine"))]
        if lacks:
            missing.append(f"{heading}: no {', no '.join(lacks)}")
    return missing


def test_every_table_in_the_results_names_its_machine_date_and_command():
    assert unnamed_tables(RESULTS.read_text()) == []


def test_twin_a_table_without_its_machine_or_date_is_caught():
    section = """## A speedup

```
python benchmarks/bench.py
```

| loop | ms |
|---|---:|
| plain | 2.0 |
"""
    assert unnamed_tables(section) == ["A speedup: no date, no machine"]
    named = section.replace("```\n\n|", "```\n\nMachine: `lscpu` model \"AMD EPYC\"; 2026-12-07.\n\n|")
    assert unnamed_tables(named) == []
