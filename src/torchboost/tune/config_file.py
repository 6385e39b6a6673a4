"""Writing tune's result to ``torchboost.toml`` without losing the user's own file.

Or to ``pyproject.toml``, where the configuration lives there (its ``[tool.torchboost]``
tables are replaced and every other line is left as it was,
:func:`~torchboost.config_files.with_tool_table`); the rules below hold for it too, the
header being the comments right above those tables and the ``.bak`` the whole file.

Three rules, so that two tunes in a row never lose a hand-written, commented file:

- When the result is the configuration the file already holds, the file is left as it
  is, byte for byte (its comments kept).
- Before a changed file replaces it, the old file is kept as ``<name>.bak`` when it is
  the user's own (a file torchboost writes begins with :data:`HEADER_START`), or when
  there is no ``.bak`` yet. A ``.bak`` is never overwritten with torchboost's output, so
  it keeps the last file the user wrote.
- The new file replaces the old one atomically (:mod:`torchboost._io`), and so does the
  ``.bak``: a full disk leaves neither an empty file nor a half-written one.

The header also records what the file was tuned for (:class:`TunedFor`: the command as
typed, on its first line, and the script with its content hash on the next), in
comments, so the file's tables stay settings only and every torchboost reads it.
``torchboost run`` reads the record back and says when the script it runs is another
version. A torchboost file already holding the configuration is rewritten when its
record is of another script or command: left alone, it would speak of the old one.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from torchboost._io import atomic_write_bytes
from torchboost.config import BoostConfig, ConfigError, Overlay
from torchboost.config_files import (HEADER_START, has_tool_table, header_lines, in_pyproject, tool_toml,
                                     with_tool_table)
from torchboost.process.launch import UsageError, parse_launch, without_interpreter
from torchboost.tune.trials.journal import script_digest

__all__ = ["HEADER_START", "ConfigWrite", "TunedFor", "backup_path", "settings_to_config", "tuned_elsewhere", "tuned_for",
           "user_config",
           "write_config",
           "written_by_torchboost"]

_SCRIPT_LINE = re.compile(r"^Tuned on (?P<script>.+) with sha256 (?P<sha256>[0-9a-f]+)\.$")


@dataclass(frozen=True)
class TunedFor:
    """What a torchboost.toml was tuned for: the command, and the script it ran."""

    command: tuple[str, ...]
    """The command as typed after ``--``."""
    script: str | None = None
    """The file the command runs (``-m``: the module's file), as named then; None: unknown."""
    script_sha256: str | None = None
    """Its content hash (:func:`~torchboost.tune.trials.journal.script_digest`)."""

    @classmethod
    def of(cls, command: Sequence[str]) -> "TunedFor":
        """The record for ``command`` now (its script read from disk, a module not imported)."""
        try:
            path = parse_launch(command).script
        except UsageError:  # a command that cannot run here (a report rebuilt elsewhere): no script known
            path = None
        return cls(tuple(command), None if path is None else _shown(path), script_digest(path))

    def lines(self) -> list[str]:
        """The header's first lines (without "# "), as :meth:`from_lines` reads them."""
        lines = [f"{HEADER_START} {shlex.join(self.command)}"]
        if self.script is not None and self.script_sha256 is not None:
            lines.append(f"Tuned on {self.script} with sha256 {self.script_sha256}.")
        return lines

    @classmethod
    def from_lines(cls, lines: Sequence[str]) -> "TunedFor | None":
        """The record in a header's lines (without "# "); None when it has none."""
        if not lines or not lines[0].startswith(f"{HEADER_START} "):
            return None
        try:
            command = tuple(shlex.split(lines[0][len(HEADER_START) + 1:]))
        except ValueError:  # a hand-edited, unbalanced quote
            return None
        found = _SCRIPT_LINE.match(lines[1]) if len(lines) > 1 else None
        return cls(command, *(found.group("script", "sha256") if found else (None, None)))

    def differences(self, now: "TunedFor") -> list[str]:
        """What differs in ``now``, in words ("sha256 0123abcd… then, 4567ef01… now",
        "command then: python train.py --bs 64"); [] when nothing this record holds does.
        ``python3 train.py`` is the same command as ``python train.py``."""
        out = []
        if self.script_sha256 is not None and self.script_sha256 != now.script_sha256:
            out.append(f"sha256 {self.script_sha256[:8]}… then, "
                       f"{now.script_sha256[:8] + '…' if now.script_sha256 else 'no file'} now")
        if without_interpreter(self.command) != without_interpreter(now.command):
            out.append(f"command then: {shlex.join(self.command)}")
        return out


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:  # outside the working folder
        return str(path)


def tuned_for(path: Path) -> TunedFor | None:
    """The record in the header of the configuration at ``path`` (a torchboost.toml, or a
    pyproject.toml's ``[tool.torchboost]``); None when it has none (the user's own file,
    or one an older torchboost wrote without the script's hash)."""
    return TunedFor.from_lines(header_lines(path))


def tuned_elsewhere(header: Sequence[str], command: Sequence[str]) -> str | None:
    """What a configuration whose header is ``header`` was tuned for, in words, when that
    is not ``command`` as it now is ("another version of train.py (sha256 …)", "another
    command (command then: …)"); None when it is, or when the header has no record."""
    then = TunedFor.from_lines(header)
    if then is None:  # the user's own file, or an older torchboost's: nothing to check against
        return None
    now = TunedFor.of(command)
    differs = then.differences(now)
    if not differs:
        return None
    what = f"another version of {then.script or now.script}" if then.script_sha256 != now.script_sha256 \
        else "another command"
    return f"{what} ({'; '.join(differs)})"


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
    """True when the configuration at ``path`` begins with torchboost's header (False: the
    user's own, or no readable file)."""
    return any(line.startswith(HEADER_START) for line in header_lines(path)[:1])


def write_config(path: Path, config: BoostConfig, header: str) -> ConfigWrite:
    """Write ``config`` with ``header`` (whose first line starts with :data:`HEADER_START`)
    to ``path``, keeping the user's file as described in this module's docstring."""
    path = Path(path)
    if path.is_file() and _holds(path, config) and not _record_changed(path, header):
        return ConfigWrite(path=path, changed=False)
    text = _new_text(path, config, header)
    backup = None
    if path.is_file():
        backup = backup_path(path)
        if written_by_torchboost(path) and backup.exists():
            backup = None  # the .bak holds an earlier file, perhaps the user's own: keep it
        else:  # atomically too: a full disk leaves no empty .bak, and an earlier .bak intact
            atomic_write_bytes(backup, path.read_bytes())
            shutil.copystat(path, backup)
    atomic_write_bytes(path, text.encode("utf-8"))
    return ConfigWrite(path=path, changed=True, backup=backup)


def _new_text(path: Path, config: BoostConfig, header: str) -> str:
    """The file's new text: a torchboost.toml's whole; a pyproject.toml's own lines with its
    ``[tool.torchboost]`` tables replaced (ConfigError where they cannot be, before any write)."""
    if not in_pyproject(path):
        return config.to_toml_string(header=header)
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    return with_tool_table(old, tool_toml(config, header), path)


def _record_changed(path: Path, header: str) -> bool:
    """True when torchboost wrote ``path`` for another script or command than ``header``'s."""
    old, new = tuned_for(path), TunedFor.from_lines(header.splitlines())
    return old is not None and new is not None and old != new


def _holds(path: Path, config: BoostConfig) -> bool:
    """True when the file at ``path`` reads as ``config`` (a file that does not read: False)."""
    try:
        return BoostConfig.from_toml(path) == config
    except ConfigError:
        return False


def user_config(path: Path) -> BoostConfig:
    """Where the search starts: the configuration at ``path`` when there is one (a
    torchboost.toml, or a pyproject.toml with ``[tool.torchboost]``; every setting in it is
    kept unless a kept change replaces it), else plain PyTorch. Raises
    :class:`~torchboost.config.ConfigError` for a file that does not parse."""
    if Path(path).is_dir():
        raise ConfigError(f"{path}: a directory; --config names the torchboost.toml file to write")
    there = Path(path).is_file() and (not in_pyproject(path) or has_tool_table(path))
    return BoostConfig.from_toml(path) if there else BoostConfig.off()


def settings_to_config(settings: dict[str, Any] | Overlay, base: BoostConfig | None = None) -> BoostConfig:
    """A torchboost.toml config: the user's own (``base``; None: plain PyTorch, "off"/"keep")
    with the kept settings on top; nothing else is changed."""
    return Overlay(settings).on(base if base is not None else BoostConfig.off())
