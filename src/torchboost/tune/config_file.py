"""Writing tune's result to ``torchboost.toml`` without losing the user's own file.

Three rules, so that two tunes in a row never lose a hand-written, commented file:

- When the result is the configuration the file already holds, the file is left as it
  is, byte for byte (its comments kept).
- Before a changed file replaces it, the old file is kept as ``<name>.bak`` when it is
  the user's own (a file torchboost writes begins with :data:`HEADER_START`), or when
  there is no ``.bak`` yet. A ``.bak`` is never overwritten with torchboost's output, so
  it keeps the last file the user wrote.
- The new file replaces the old one atomically (:mod:`torchboost._io`), and so does the
  ``.bak``: a full disk leaves neither an empty file nor a half-written one.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from torchboost._io import atomic_write_bytes
from torchboost.config import BoostConfig, ConfigError

__all__ = ["HEADER_START", "ConfigWrite", "backup_path", "write_config", "written_by_torchboost"]

HEADER_START = "Tuned by torchboost for:"
"""How the header of every torchboost.toml that tune writes begins (its first line is
``# Tuned by torchboost for: COMMAND``)."""


@dataclass(frozen=True)
class ConfigWrite:
    """What :func:`write_config` did."""

    path: Path
    """The torchboost.toml."""
    changed: bool
    """False: the file already held this configuration and was left untouched."""
    backup: Path | None = None
    """Where the previous file was kept (None: it was not copied this time)."""


def backup_path(path: Path) -> Path:
    """``torchboost.toml.bak`` beside ``torchboost.toml``."""
    return path.with_name(path.name + ".bak")


def written_by_torchboost(path: Path) -> bool:
    """True when the file at ``path`` begins with torchboost's header (False: the user's own,
    or no readable file)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.readline().startswith(f"# {HEADER_START}")
    except OSError:
        return False


def write_config(path: Path, config: BoostConfig, header: str) -> ConfigWrite:
    """Write ``config`` with ``header`` (whose first line starts with :data:`HEADER_START`)
    to ``path``, keeping the user's file as described in this module's docstring."""
    path = Path(path)
    if path.is_file() and _holds(path, config):
        return ConfigWrite(path=path, changed=False)
    backup = None
    if path.is_file():
        backup = backup_path(path)
        if written_by_torchboost(path) and backup.exists():
            backup = None  # the .bak holds an earlier file, perhaps the user's own: keep it
        else:  # atomically too: a full disk leaves no empty .bak, and an earlier .bak intact
            atomic_write_bytes(backup, path.read_bytes())
            shutil.copystat(path, backup)
    atomic_write_bytes(path, config.to_toml_string(header=header).encode("utf-8"))
    return ConfigWrite(path=path, changed=True, backup=backup)


def _holds(path: Path, config: BoostConfig) -> bool:
    """True when the file at ``path`` reads as ``config`` (a file that does not read: False)."""
    try:
        return BoostConfig.from_toml(path) == config
    except ConfigError:
        return False
