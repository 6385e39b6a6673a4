"""One persistent compile cache for tune's trials, its end-to-end check and ``torchboost run``.

A first compile costs tens of seconds; a later one that finds its graphs in Inductor's
caches (the FX graph cache and AOTAutograd's, both under ``TORCHINDUCTOR_CACHE_DIR``)
costs a few. Inductor's default folder is under the system's temporary folder, which a
reboot may empty. torchboost keeps the cache in the user's cache folder instead
(``$XDG_CACHE_HOME/torchboost/inductor``, else ``~/.cache/torchboost/inductor``), so the
compile tune paid for is the one ``torchboost run`` finds warm. A
``TORCHINDUCTOR_CACHE_DIR`` the user set is theirs and is kept.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

__all__ = ["CACHE_ENV", "cache_folder", "compile_cache_env"]

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
"""Inductor's cache folder variable."""


def cache_folder(environ: Mapping[str, str] = os.environ) -> Path:
    """The compile cache folder torchboost's runs use: the user's own when set, else torchboost's."""
    if environ.get(CACHE_ENV):
        return Path(environ[CACHE_ENV])
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "torchboost" / "inductor"


def compile_cache_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """What to add to ``environ`` for a run of the script: ``{}`` when the user chose the
    folder, else torchboost's (created, when it can be)."""
    if environ.get(CACHE_ENV):
        return {}
    folder = cache_folder(environ)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return {}  # no writable cache folder: Inductor's default stands
    return {CACHE_ENV: str(folder)}
