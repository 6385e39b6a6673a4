"""Filters torchboost attaches to a library's loggers, taken off again when observation ends.

A technique may attach a :class:`logging.Filter` to a library's logger while the script
runs (compile watches dynamo's ``torch._dynamo.convert_frame`` logger for its recompile
limit). Attached in the observed or no-code-applied script, it must not outlive the
observation: :meth:`LoggerFilters.start` notes the filters every logger has, and
:meth:`LoggerFilters.release` removes the filters of torchboost's own making that were
added since. The script's own filters, and ours that were there before, are left alone.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator

__all__ = ["LoggerFilters", "torchboost_filters"]


def _loggers() -> Iterator[logging.Logger]:
    yield logging.getLogger()
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger):  # not a PlaceHolder for a dotted parent
            yield logger


def _ours(log_filter: Any) -> bool:
    # A Filter instance's class, or a plain callable used as a filter, defined in torchboost.
    owner = log_filter if callable(log_filter) and not isinstance(log_filter, logging.Filter) else type(log_filter)
    return getattr(owner, "__module__", "").startswith("torchboost.")


def torchboost_filters() -> list[tuple[str, Any]]:
    """(logger name, filter) for every filter of torchboost's making on any logger now."""
    return [(logger.name, f) for logger in _loggers() for f in logger.filters if _ours(f)]


class LoggerFilters:
    """Notes the loggers' filters at ``start``; ``release`` removes ours added since."""

    def __init__(self) -> None:
        self._before: dict[str, list[Any]] | None = None  # None: not started, or released

    def start(self) -> "LoggerFilters":
        """Note what every logger has now."""
        self._before = {logger.name: list(logger.filters) for logger in _loggers()}
        return self

    def release(self) -> None:
        """Remove every torchboost filter added to a logger since :meth:`start`; safe to call twice."""
        if self._before is None:
            return
        for logger in _loggers():
            before = self._before.get(logger.name, [])
            for log_filter in list(logger.filters):
                if _ours(log_filter) and not any(log_filter is f for f in before):
                    logger.removeFilter(log_filter)
        self._before = None
