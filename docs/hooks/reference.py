"""MkDocs hook: the generated tables of ``torchboost.reference`` in place of their markers.

A page writes ``<!-- torchboost:config-reference -->`` (or another name of
``torchboost.reference.GENERATED``) where the table goes; an unknown name fails the build.
"""

from __future__ import annotations

import re

from torchboost.reference import GENERATED

_MARK = re.compile(r"<!-- torchboost:([a-z-]+) -->")


def on_page_markdown(markdown: str, **kwargs: object) -> str:
    def table(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATED:
            raise ValueError(f"unknown generated table {name!r}; known: {sorted(GENERATED)}")
        return GENERATED[name]()

    return _MARK.sub(table, markdown)
