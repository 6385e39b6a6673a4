"""The checks of a configuration's values, and the error they raise, naming the field.

Each technique's section calls them in its ``__post_init__``; :mod:`torchboost.config`
re-exports them (``from torchboost.config import ConfigError, check_choice``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ConfigError", "check_bool_or_word", "check_choice", "check_int_or_word", "show_value"]


class ConfigError(ValueError):
    """A configuration value or key is invalid; the message names the field."""


def show_value(value: Any) -> str:
    """``value`` as TOML writes it: true/false, a quoted string, a number."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else repr(value)


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    """Raise :class:`ConfigError` unless ``value`` is one of the words ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"{name}: expected one of {', '.join(choices)}; got {show_value(value)}")


def check_int_or_word(name: str, value: Any, minimum: int, words: tuple[str, ...], maximum: int | None = None) -> None:
    """Raise :class:`ConfigError` unless ``value`` is an integer in ``[minimum, maximum]`` or one of ``words``."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if is_int and value >= minimum and (maximum is None or value <= maximum):
        return
    if isinstance(value, str) and value in words:
        return
    bound = f"an integer >= {minimum}" if maximum is None else f"an integer from {minimum} to {maximum}"
    allowed = " | ".join([*words, bound])
    raise ConfigError(f"{name}: expected {allowed}; got {show_value(value)}")


def check_bool_or_word(name: str, value: Any, words: tuple[str, ...]) -> None:
    """Raise :class:`ConfigError` unless ``value`` is true, false or one of ``words``."""
    if isinstance(value, bool) or (isinstance(value, str) and value in words):
        return
    allowed = " | ".join([*words, "true", "false"])
    raise ConfigError(f"{name}: expected {allowed}; got {show_value(value)}")
