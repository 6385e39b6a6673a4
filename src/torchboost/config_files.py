"""Where the configuration lives: ``torchboost.toml``, or ``[tool.torchboost]`` in ``pyproject.toml``.

A folder is configured by one of the two. :func:`find_config` says which (None: neither);
both at once is a :class:`~torchboost.config.ConfigError` naming both, since neither
would be the obvious one to read. In ``pyproject.toml`` the tables are the same as in
``torchboost.toml``, one level down::

    [tool.torchboost.precision]
    mode = "bf16"

:func:`config_to_apply` is what ``torchboost run`` applies, read once (:class:`ConfigFile`);
:func:`config_to_write` is where ``torchboost tune`` writes its result: the file the
configuration already lives in, else ``torchboost.toml``. :func:`with_tool_table` puts
the tables into a ``pyproject.toml``'s text in place of its old ``[tool.torchboost]``
tables (and the header tune wrote above them), leaving every other line as it
was, and refuses, naming the file, when the result would not read back as exactly that.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from torchboost.config import CONFIG_FILENAME, PYPROJECT_FILENAME, BoostConfig, ConfigError, parse_toml, tool_table, \
    toml_text
from torchboost.usage import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = ["HEADER_START", "ConfigFile", "config_text", "config_to_apply", "config_to_write", "config_words", "find_config", "has_tool_table", "header_lines", "in_pyproject",
           "tool_toml", "with_tool_table"]

HEADER_START = "Tuned by torchboost for:"
"""How the header of every configuration that tune writes begins (its first line is
``# Tuned by torchboost for: COMMAND``)."""

_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")
"""A table's header line, ``[a.b]`` (an array of tables, ``[[a]]``, is not one)."""


def in_pyproject(path: str | Path) -> bool:
    """True when ``path`` names a ``pyproject.toml`` (its ``[tool.torchboost]`` is the configuration)."""
    return Path(path).name == PYPROJECT_FILENAME


def config_words(path: str | Path) -> str:
    """How the messages name the configuration at ``path``: ``pyproject.toml [tool.torchboost]``."""
    return f"{path} [tool.torchboost]" if in_pyproject(path) else str(path)


def has_tool_table(path: str | Path) -> bool:
    """True when the file at ``path`` parses as TOML with a ``[tool.torchboost]`` table."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    tool = data.get("tool")
    return isinstance(tool, dict) and "torchboost" in tool


def find_config(folder: str | Path = ".") -> Path | None:
    """The configuration of ``folder``: its ``torchboost.toml``, or its ``pyproject.toml``
    when that has a ``[tool.torchboost]`` table; None when neither. ConfigError when both."""
    folder = Path(folder)
    own, project = folder / CONFIG_FILENAME, folder / PYPROJECT_FILENAME
    found = [path for path, there in ((own, own.is_file()), (project, has_tool_table(project))) if there]
    if len(found) == 2:
        raise ConfigError(f"both {own} and {config_words(project)} configure torchboost; keep one of them "
                          "(or name one with --config)")
    return found[0] if found else None


@dataclass(frozen=True)
class ConfigFile:
    """A configuration file, read once: what it configures, the keys it sets itself, its header."""

    path: Path
    """Where it was read: a ``torchboost.toml``, or a ``pyproject.toml`` (its ``[tool.torchboost]``)."""
    config: BoostConfig
    """The configuration; what the file does not set takes the defaults."""
    written: frozenset[str]
    """The dotted keys the file sets itself."""
    header: tuple[str, ...]
    """The comment lines right above the configuration (:func:`header_lines`)."""

    @classmethod
    def read(cls, path: str | Path) -> "ConfigFile":
        """Read the file at ``path``; ConfigError naming the file (and the field) when it cannot be used."""
        path = Path(path)
        text = toml_text(path)
        data = parse_toml(path, text)
        config = BoostConfig.from_parsed(path, data)
        written = {f"{section}.{key}" for section, values in tool_table(path, data).items()
                   if isinstance(values, dict) for key in values}
        return cls(path, config, frozenset(written), tuple(_header(path, text)))

    @property
    def words(self) -> str:
        """How the messages name it (:func:`config_words`)."""
        return config_words(self.path)


def config_to_apply(name: str | None) -> ConfigFile:
    """What ``torchboost run`` applies, read once: the file named (``--config``), else the
    folder's configuration; UsageError when there is none."""
    if name is None:
        found = find_config()
        if found is None:
            raise UsageError(f"no {CONFIG_FILENAME} here, nor [tool.torchboost] in {PYPROJECT_FILENAME}; "
                             "write one with 'torchboost tune -- python train.py'")
        return ConfigFile.read(found)
    if not Path(name).is_file():
        raise UsageError(f"{name}: no such file; write one with 'torchboost tune -- python train.py'")
    return ConfigFile.read(name)


def config_to_write(folder: str | Path = ".") -> Path:
    """Where tune writes in ``folder``: where the configuration lives, else ``torchboost.toml``."""
    return find_config(folder) or Path(folder) / CONFIG_FILENAME


def _table_path(line: str) -> tuple[str, ...] | None:
    found = _HEADER.match(line)
    return tuple(part.strip().strip('"') for part in found.group(1).split(".")) if found else None


def _ours(path: tuple[str, ...] | None) -> bool:
    return path is not None and path[:2] == ("tool", "torchboost")


def _comments_above(lines: list[str], index: int) -> int:
    """The index where the block of comment lines right above ``lines[index]`` begins."""
    start = index
    while start > 0 and lines[start - 1].startswith("#"):
        start -= 1
    return start


def header_lines(path: str | Path) -> list[str]:
    """The comment lines (without ``# ``) that open the configuration at ``path``: a
    ``torchboost.toml``'s first two lines; in a ``pyproject.toml``, those right above its
    first ``[tool.torchboost]`` table. [] when the file cannot be read."""
    try:
        return _header(path, Path(path).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return []


def _header(path: str | Path, text: str) -> list[str]:
    lines = text.splitlines()
    if in_pyproject(path):
        first = next((i for i, line in enumerate(lines) if _ours(_table_path(line))), None)
        lines = [] if first is None else lines[_comments_above(lines, first):first]
    return [line.removeprefix("# ").removeprefix("#") for line in lines[:2]]


def config_text(path: str | Path) -> str:
    """The configuration's own text at ``path``: a torchboost.toml's whole; a pyproject.toml's
    ``[tool.torchboost]`` tables with tune's header above them (its other lines left out)."""
    text = Path(path).read_text(encoding="utf-8")
    if not in_pyproject(path):
        return text
    lines = text.splitlines()
    return "\n".join(line for line, ours in zip(lines, _ours_mask(lines)) if ours).strip("\n") + "\n"


def tool_toml(config: BoostConfig, header: str = "") -> str:
    """``config`` as ``[tool.torchboost.SECTION]`` tables, with ``header`` lines as comments above."""
    comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    return comment + tomli_w.dumps({"tool": {"torchboost": config.to_dict()}})


def _ours_mask(lines: list[str]) -> list[bool]:
    """Which of ``lines`` are the ``[tool.torchboost]`` tables' (each from its header to the
    next table's) or tune's header right above the first."""
    mask, inside, first = [], False, True
    for line in lines:
        path = _table_path(line)
        if path is not None:
            inside = _ours(path)
            if inside and first:
                first, start = False, _comments_above(lines, len(mask))
                if start < len(mask) and lines[start].startswith(f"# {HEADER_START}"):
                    mask[start:] = [True] * (len(mask) - start)  # tune's header: the new one replaces it
        mask.append(inside)
    return mask


def _without_ours(lines: list[str]) -> tuple[list[str], int]:
    """``lines`` without the configuration's (:func:`_ours_mask`); the index in what is left
    where the first of them stood (-1: none)."""
    mask = _ours_mask(lines)
    at = mask.index(True) if True in mask else -1
    return [line for line, ours in zip(lines, mask) if not ours], at


def with_tool_table(text: str, fragment: str, path: str | Path = PYPROJECT_FILENAME) -> str:
    """The ``pyproject.toml`` ``text`` with ``fragment`` (:func:`tool_toml`'s output) in
    place of its ``[tool.torchboost]`` tables, or after its last line when it has none.
    ConfigError, naming ``path``, when the result would not read back as the same file
    with that table (a table written inline, or as dotted keys under ``[tool]``)."""
    kept, at = _without_ours(text.splitlines())
    where = at if at >= 0 else len(kept)
    before, after = kept[:where], kept[where:]
    while before and not before[-1].strip():
        before.pop()
    while after and not after[0].strip():
        after.pop(0)
    out = before + ([""] if before else []) + fragment.rstrip("\n").splitlines() + ([""] if after else []) + after
    result = "\n".join(out).rstrip("\n") + "\n"
    if not _same_but_ours(text, result, fragment):
        raise ConfigError(f"{config_words(path)}: written in a way tune cannot rewrite line by line (inline, or as "
                          "dotted keys under [tool]); write it as [tool.torchboost.SECTION] tables")
    return result


def _same_but_ours(before: str, after: str, fragment: str) -> bool:
    """True when ``after`` parses as ``before`` with ``[tool.torchboost]`` replaced by ``fragment``'s."""
    try:
        old, new, ours = (tomllib.loads(t) for t in (before, after, fragment))
    except tomllib.TOMLDecodeError:
        return False
    expected: dict[str, Any] = {**old, "tool": {**old.get("tool", {}), "torchboost": ours["tool"]["torchboost"]}}
    return new == expected
