"""BoostConfig: what torchboost may change, one frozen section per technique.

The configuration lives in one TOML file, ``torchboost.toml``, one table per technique
(or the same tables under ``[tool.torchboost]`` in ``pyproject.toml``: one of the two, see
:mod:`torchboost.config_files`)::

    [precision]
    mode = "auto"            # auto | fp32 | tf32 | bf16 | fp16
    [loader]
    num_workers = "auto"     # auto | keep | int >= 0
    ...

Each section is a frozen, keyword-only dataclass declared in its technique's module
under :mod:`torchboost.techniques` and registered here with :func:`register_section`;
:class:`BoostConfig` holds one instance of every registered section. ``"auto"`` is
resolved at ``Booster.prepare`` time from the hardware; ``"keep"`` leaves the user's own
setting untouched. Every value is validated when its section is built, and a bad value
raises :class:`ConfigError` naming the field and what it accepts.

:class:`Overlay` is a partial configuration, some fields of some sections: the typed
value in which candidate settings travel between the tuner, the trial child and the
no-code applier. Dotted names (``"loader.num_workers"``) exist only at the edges: TOML,
the journal, report JSON and the command line.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, TypeVar, Union

import tomli_w

from torchboost._io import atomic_write_bytes
from torchboost.config_checks import (ConfigError, check_bool_or_word, check_choice, check_int_or_word,
                                      show_value)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = [
    "AUTO",
    "KEEP",
    "BoostConfig",
    "BoolOrWord",
    "CONFIG_FILENAME",
    "PYPROJECT_FILENAME",
    "ConfigError",
    "IntOrWord",
    "Overlay",
    "check_bool_or_word",
    "check_choice",
    "check_int_or_word",
    "parse_toml",
    "register_section",
    "section_classes",
    "tool_table",
    "toml_text",
]

CONFIG_FILENAME = "torchboost.toml"
"""The file ``Booster()`` reads from the working directory when no config is given."""

PYPROJECT_FILENAME = "pyproject.toml"
"""The project file whose ``[tool.torchboost]`` table reads as a ``torchboost.toml``."""

AUTO = "auto"
KEEP = "keep"

IntOrWord = Union[int, str]
BoolOrWord = Union[bool, str]

S = TypeVar("S")


# -- the section table ------------------------------------------------------------------

_SECTIONS: dict[str, type] = {}


def register_section(cls: type[S]) -> type[S]:
    """Register a technique's config section; the technique registry calls it for each
    technique's ``section``, in application order, which is the file's order.

    The class is a frozen dataclass with ``section: ClassVar[str]`` (its TOML table) and
    a classmethod ``off()`` giving the plain-PyTorch value (no change to the user's script).
    """
    if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__}: a config section must be a frozen dataclass")
    name = getattr(cls, "section", None)
    if not isinstance(name, str):
        raise TypeError(f"{cls.__name__}: a config section needs `section: ClassVar[str]`")
    known = _SECTIONS.get(name)
    if known is not None and known.__qualname__ != cls.__qualname__:
        raise TypeError(f"config section {name!r} is declared twice: {known.__qualname__} and {cls.__qualname__}")
    _SECTIONS[name] = cls
    return cls


def section_classes() -> dict[str, type]:
    """Every registered section class by TOML table name, in file (= application) order."""
    return dict(_SECTIONS)


def _unknown(kind: str, name: str, valid: list[str], prefix: str = "") -> ConfigError:
    close = difflib.get_close_matches(name, valid, n=1)
    names = [prefix + v for v in valid]
    hint = f'; did you mean "{prefix}{close[0]}"?' if close else f"; valid: {', '.join(names)}"
    return ConfigError(f'unknown {kind} "{prefix}{name}"{hint}')


def _field_names(section_cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(section_cls)]


def _build_section(name: str, values: Any) -> Any:
    table = section_classes()
    if name not in table:
        raise _unknown("section", name, list(table))
    if not isinstance(values, Mapping):
        raise ConfigError(f"{name}: expected a table; got {show_value(values)}")
    valid = _field_names(table[name])
    for key in values:
        if key not in valid:
            raise _unknown("key", key, valid, prefix=f"{name}.")
    return table[name](**values)


# -- the whole configuration ------------------------------------------------------------

class BoostConfig:
    """Every technique's settings: one frozen section object per registered technique.

    ``BoostConfig(precision=PrecisionConfig(mode="bf16"))``; a section not given takes its
    defaults (everything ``auto``, compile off). :meth:`section` reads one, typed:
    ``config.section(LoaderConfig).num_workers``; in a script, a section is an attribute
    too (``config.loader.num_workers``, untyped). Immutable and comparable.
    """

    __slots__ = ("_sections",)

    def __init__(self, **sections: Any) -> None:
        table = section_classes()
        for name in sections:
            if name not in table:
                raise _unknown("section", name, list(table))
        values: dict[str, Any] = {}
        for name, cls in table.items():
            value = sections.get(name)
            if value is None:
                value = cls()
            elif not isinstance(value, cls):
                raise ConfigError(f"{name}: expected a {cls.__name__}")
            values[name] = value
        object.__setattr__(self, "_sections", values)

    def section(self, section_cls: type[S]) -> S:
        """The section of class ``section_cls`` (a registered section), typed as that class."""
        value = self._sections.get(getattr(section_cls, "section", None))
        if not isinstance(value, section_cls):
            raise TypeError(f"{getattr(section_cls, '__name__', section_cls)!r} is not a registered config section")
        return value

    def __getattr__(self, name: str) -> Any:
        # The untyped spelling for scripts and the REPL (``config.loader``); the library
        # reads sections with :meth:`section`.
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._sections[name]
        except KeyError:
            raise AttributeError(f"BoostConfig has no section {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to BoostConfig.{name}: use replace()")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BoostConfig) and self._sections == other._sections

    def __hash__(self) -> int:
        return hash(tuple(self._sections.items()))

    def __repr__(self) -> str:
        return f"BoostConfig({', '.join(f'{k}={v!r}' for k, v in self._sections.items())})"

    def __reduce__(self) -> tuple[Callable[..., "BoostConfig"], tuple[Any, ...]]:
        return (_rebuild, (dict(self._sections),))

    def sections(self) -> dict[str, Any]:
        """Section objects by TOML table name, in file order."""
        return dict(self._sections)

    @classmethod
    def off(cls) -> "BoostConfig":
        """Every technique off: a Booster with this config is plain PyTorch."""
        return cls(**{name: section.off() for name, section in section_classes().items()})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BoostConfig":
        """Build from nested mappings; missing keys take defaults, unknown keys are an error."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"expected a table of sections; got {type(data).__name__}")
        return cls(**{name: _build_section(name, values) for name, values in data.items()})

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Nested plain dicts, the shape of ``torchboost.toml``."""
        return {name: dataclasses.asdict(section) for name, section in self._sections.items()}

    def replace(self, **changes: Mapping[str, Any]) -> "BoostConfig":
        """A copy with some keys changed: ``cfg.replace(precision={"mode": "bf16"})``."""
        data = self.to_dict()
        for name, values in changes.items():
            if name not in data:
                raise _unknown("section", name, list(data))
            data[name] = {**data[name], **values}
        return BoostConfig.from_dict(data)

    @classmethod
    def from_toml(cls, path: str | Path) -> "BoostConfig":
        """Read a ``torchboost.toml``, or a ``pyproject.toml``'s ``[tool.torchboost]``
        table; errors name the file (and the table) and the field."""
        path = Path(path)
        return cls.from_parsed(path, parse_toml(path, toml_text(path)))

    @classmethod
    def from_parsed(cls, path: Path, data: Mapping[str, Any]) -> "BoostConfig":
        """The configuration in ``data``, the parsed file at ``path`` (:func:`parse_toml`);
        errors name the file (and the table) and the field."""
        where = f"{path} [tool.torchboost]" if path.name == PYPROJECT_FILENAME else str(path)
        try:
            return cls.from_dict(tool_table(path, data))
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    def to_toml_string(self, header: str = "") -> str:
        """The TOML text, with ``header`` lines as leading comments."""
        comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
        return comment + tomli_w.dumps(self.to_dict())

    def to_toml(self, path: str | Path, header: str = "") -> None:
        """Write atomically: a crash mid-write leaves any previous file intact."""
        atomic_write_bytes(Path(path), self.to_toml_string(header).encode("utf-8"))


def toml_text(path: Path) -> str:
    """The text of the configuration file at ``path``; ConfigError naming it when it cannot be read."""
    if path.is_dir():
        raise ConfigError(f"{path}: a directory, not a torchboost.toml file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); TOML files are UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None


def parse_toml(path: Path, text: str) -> dict[str, Any]:
    """``text``, read from ``path``, parsed; ConfigError naming the file when it is not TOML."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def tool_table(path: Path, data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The configuration's tables in the parsed file at ``path``: the whole of a
    ``torchboost.toml``; a ``pyproject.toml``'s ``[tool.torchboost]`` (ConfigError without one)."""
    if path.name != PYPROJECT_FILENAME:
        return data
    table = (data.get("tool") or {}).get("torchboost") if isinstance(data.get("tool"), Mapping) else None
    if table is None:
        raise ConfigError(f"{path}: no [tool.torchboost] table")
    return table


def _rebuild(sections: dict[str, Any]) -> BoostConfig:
    return BoostConfig(**sections)


# -- a partial configuration ------------------------------------------------------------

def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


class Overlay(Mapping[str, Any]):
    """Some fields of some sections, validated: a candidate's changes, a trial's settings.

    Built from section classes, ``Overlay.of(LoaderConfig, num_workers=2)``, combined with
    ``|`` (the right side wins), applied with :meth:`on`. It reads as an immutable mapping
    of dotted names (``"loader.num_workers"``) for the edges that store it (journal, report
    JSON): :meth:`to_dict` and :meth:`from_dict`.
    """

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        clean: dict[tuple[str, str], Any] = {}
        table = section_classes()
        for dotted, value in (values or {}).items():
            section, _, key = str(dotted).partition(".")
            if not key:
                raise ConfigError(f'setting "{dotted}": expected "section.key"')
            if section not in table:
                raise _unknown("section", section, list(table))
            if key not in _field_names(table[section]):
                raise _unknown("key", key, _field_names(table[section]), prefix=f"{section}.")
            clean[(section, key)] = value
        object.__setattr__(self, "_values", dict(sorted(clean.items())))
        for section, values in self._sections().items():
            table[section](**values)  # each section it carries checks its values; no other is built

    def _sections(self) -> dict[str, dict[str, Any]]:
        """The values by section name, then field name."""
        sections: dict[str, dict[str, Any]] = {}
        for (section, key), value in self._values.items():
            sections.setdefault(section, {})[key] = value
        return sections

    @classmethod
    def of(cls, section_cls: type, **values: Any) -> "Overlay":
        """Values for fields of one section: ``Overlay.of(CpuConfig, threads=1)``."""
        return cls({f"{section_cls.section}.{key}": value for key, value in values.items()})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Overlay":
        """From dotted names (journal, report JSON, a trial's spec)."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"settings: expected a table of dotted names; got {type(data).__name__}")
        return cls(data)

    @classmethod
    def between(cls, base: BoostConfig, config: BoostConfig) -> "Overlay":
        """The fields in which ``config`` differs from ``base``."""
        old = base.to_dict()
        return cls({f"{name}.{key}": value for name, values in config.to_dict().items()
                    for key, value in values.items() if old[name][key] != value})

    def to_dict(self) -> dict[str, Any]:
        """Dotted names to values, sorted."""
        return {f"{section}.{key}": value for (section, key), value in self._values.items()}

    def on(self, config: BoostConfig) -> BoostConfig:
        """``config`` with these fields replaced (validated)."""
        return config.replace(**self._sections())

    def section(self, section_cls: type) -> dict[str, Any]:
        """The fields this overlay sets in ``section_cls``'s table, by field name."""
        return {key: value for (section, key), value in self._values.items() if section == section_cls.section}

    def value(self, section_cls: type, key: str, default: Any = None) -> Any:
        """One field's value, or ``default`` when the overlay does not set it."""
        if key not in _field_names(section_cls):
            raise _unknown("key", key, _field_names(section_cls), prefix=f"{section_cls.section}.")
        return self._values.get((section_cls.section, key), default)

    def without(self, section_cls: type) -> "Overlay":
        """A copy without any field of ``section_cls``."""
        return Overlay({k: v for k, v in self.to_dict().items() if not k.startswith(f"{section_cls.section}.")})

    def describe(self) -> str:
        """Short text: ``cpu.threads=1, loader.num_workers=2``, or ``baseline`` when empty."""
        return ", ".join(f"{k}={_show(v)}" for k, v in self.to_dict().items()) or "baseline"

    def __or__(self, other: Mapping[str, Any]) -> "Overlay":
        return Overlay({**self.to_dict(), **dict(other)})

    def __getitem__(self, dotted: str) -> Any:
        section, _, key = dotted.partition(".")
        return self._values[(section, key)]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self._values)

    def __hash__(self) -> int:
        return hash(tuple(self._values.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and self.to_dict() == dict(other)

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError("an Overlay is immutable: combine with |")

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (Overlay, (self.to_dict(),))

    def __repr__(self) -> str:
        return f"Overlay({self.to_dict()!r})"
