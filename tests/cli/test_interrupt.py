"""A stop during any sub-command is one line and 128 + the signal's number, never a traceback."""

from __future__ import annotations

import pytest

from torchboost import cli
from torchboost.cli import export


def _interrupted(monkeypatch, exc: BaseException):
    def run(args):
        raise exc

    monkeypatch.setattr(export, "run", run)
    return cli.main(["export", "--to", "lightning"])


def test_a_bare_ctrl_c_is_sigint_and_130(monkeypatch, capsys):
    assert _interrupted(monkeypatch, KeyboardInterrupt()) == 130  # Python's own Ctrl-C has no args
    err = capsys.readouterr().err
    assert "stopped by SIGINT" in err and "Traceback" not in err and "IndexError" not in err


def test_a_passed_on_signal_keeps_its_name_and_number(monkeypatch, capsys):
    exc = KeyboardInterrupt("SIGTERM")
    exc.signum = 15
    assert _interrupted(monkeypatch, exc) == 143
    assert "stopped by SIGTERM" in capsys.readouterr().err


def test_the_check_sees_a_crash(monkeypatch):
    with pytest.raises(RuntimeError):  # not a stop: the error is the user's to see
        _interrupted(monkeypatch, RuntimeError("boom"))
