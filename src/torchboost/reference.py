"""The configuration reference and the technique tables, generated from the code: what the
docs show of ``torchboost.toml`` and of each technique, so that no fact is written twice.

:func:`config_reference` is every section and key of :class:`~torchboost.config.BoostConfig`
with its default and the docstring written beside the field; :func:`technique_order` the
order ``Booster.prepare`` applies the techniques in, with why; :func:`technique_cards` one
card per technique: its section, its levers and the findings that propose them.

The pages of ``docs/`` hold them, written in, between ``<!-- torchboost:NAME -->`` and
``<!-- /torchboost:NAME -->``, so that they read on the repository's web page without a
build: :func:`filled` is a page with every such block as the code makes it now
(``python docs/hooks/reference.py`` rewrites the pages), :func:`stale_blocks` the blocks
that differ (the docs' test and build fail on one).
"""

from __future__ import annotations

import ast
import re
import dataclasses
import inspect
import textwrap
from typing import Callable

from torchboost.config import section_classes
from torchboost.techniques.registry import techniques

__all__ = ["GENERATED", "config_reference", "field_docs", "filled", "stale_blocks", "technique_cards",
           "technique_order"]


def field_docs(cls: type) -> dict[str, str]:
    """Each field of the dataclass ``cls`` and the docstring written right below it ('' when none)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, after in zip(body, body[1:] + [None]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            text = ""
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
                text = " ".join(after.value.value.split())
            docs[node.target.id] = text
    return docs


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else str(value)


def config_reference() -> str:
    """Every section and key of ``torchboost.toml``, in the order the techniques apply, as a
    Markdown table per section: key, default, what it takes (the field's own docstring)."""
    out = []
    for name, cls in section_classes().items():
        docs = field_docs(cls)
        out += [f"### `[{name}]`", "", "| key | default | what it takes |", "| --- | --- | --- |"]
        for field in dataclasses.fields(cls):
            text = docs.get(field.name, "").replace("|", "\\|")
            out.append(f"| `{field.name}` | `{_toml_value(field.default)}` | {text} |")
        out.append("")
    return "\n".join(out)


def technique_order() -> str:
    """The order ``Booster.prepare`` applies the techniques in, with the reason each declares."""
    rows = ["| # | technique | why it comes there |", "| --- | --- | --- |"]
    rows += [f"| {t.order} | `{t.name}` | {t.placed or '-'} |" for t in techniques()]
    return "\n".join(rows)


def technique_cards() -> str:
    """One card per technique: its title, its ``torchboost.toml`` section, the tuner's levers
    (and how their candidates' losses are judged), the findings that propose it, and whether
    ``torchboost run`` applies it to an unmodified script."""
    cards = []
    for t in techniques():
        section = f"`[{t.section.section}]`" if t.section is not None else "none"
        levers = ", ".join(f"{lever.title} (loss: {lever.parity})" for lever in t.levers) or "none"
        findings = ", ".join(f"`{rule.id}`" for rule in t.rules) or "none"
        nocode = "yes" if t.nocode is not None else f"no: {t.nocode_refusal}"
        cards += [f"### {t.title} (`{t.name}`)", "", f"- section: {section}", f"- tune's levers: {levers}",
                  f"- the doctor's findings: {findings}", f"- applied by `torchboost run`: {nocode}",
                  f"- applied in its place: {t.placed or '-'}", ""]
    return "\n".join(cards)


GENERATED: dict[str, Callable[[], str]] = {"config-reference": config_reference, "technique-order": technique_order,
                                            "technique-cards": technique_cards}
"""What the docs build puts in place of ``<!-- torchboost:NAME -->``, by NAME."""


_BLOCK = re.compile(r"(<!-- torchboost:([a-z-]+) -->\n)(.*?)(<!-- /torchboost:\2 -->)", re.S)
"""A generated block of a page: its opening marker, what is between, its closing marker."""


def _generated(name: str) -> str:
    if name not in GENERATED:
        raise ValueError(f"unknown generated table {name!r}; known: {sorted(GENERATED)}")
    return f"\n{GENERATED[name]().strip()}\n\n"


def filled(markdown: str) -> str:
    """``markdown`` with each generated block's content as the code makes it now (an
    unknown NAME is a ValueError)."""
    return _BLOCK.sub(lambda m: m.group(1) + _generated(m.group(2)) + m.group(4), markdown)


def stale_blocks(markdown: str) -> list[str]:
    """The NAMEs of the generated blocks of ``markdown`` whose content is not what the code
    makes now, in page order."""
    return [m.group(2) for m in _BLOCK.finditer(markdown) if m.group(3) != _generated(m.group(2))]
