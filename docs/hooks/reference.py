"""The generated tables of the docs: written into the pages, checked by the build.

The pages hold ``torchboost.reference``'s tables between ``<!-- torchboost:NAME -->`` and
``<!-- /torchboost:NAME -->``, so they read without a build. ``python docs/hooks/reference.py``
rewrites them from the code; as an MkDocs hook, this file fails the build on a page whose
tables are stale and leaves the markers out of the site.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from torchboost.reference import filled, stale_blocks

_MARKER = re.compile(r"^<!-- /?torchboost:[a-z-]+ -->\n", re.M)


def on_page_markdown(markdown: str, page: object = None, **kwargs: object) -> str:
    """MkDocs: the page without its markers; ValueError when a generated table is stale."""
    stale = stale_blocks(markdown)
    if stale:
        where = getattr(getattr(page, "file", None), "src_path", "a page")
        raise ValueError(f"{where}: generated tables out of date ({', '.join(stale)}); "
                         "run python docs/hooks/reference.py")
    return _MARKER.sub("", markdown)


def write_pages(docs: Path) -> list[Path]:
    """Rewrite every page of ``docs`` whose generated tables are stale; the pages rewritten."""
    changed = []
    for page in sorted(docs.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        if filled(text) != text:
            page.write_text(filled(text), encoding="utf-8")
            changed.append(page)
    return changed


if __name__ == "__main__":
    for path in write_pages(Path(__file__).resolve().parents[1]):
        print(f"rewrote {path.name}", file=sys.stderr)
