"""A progress bar the script leaves open ("\\r" updates, no newline) never has torchboost's
own output glued to its end: torchboost's panel starts on a fresh line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from torchboost.cli._console import console, line_ends_tracked

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _plain_console() -> Console:
    return Console(file=sys.stdout)  # the twin: a console that does not look at the line


@pytest.mark.parametrize("make, fresh", [(console, True), (_plain_console, False)])
def test_a_console_starts_after_the_line_the_script_left_open(tmp_path, monkeypatch, make, fresh):
    path = tmp_path / "out.txt"
    with path.open("w") as both:  # stdout and stderr to one file, as in a terminal or 2>&1
        monkeypatch.setattr(sys, "stdout", both)
        monkeypatch.setattr(sys, "stderr", both)
        with line_ends_tracked():
            sys.stderr.write("\rstep 2/10")  # the relayed script's bar, line left open
            make().print("torchboost doctor")
            make().print("next line")
    text = path.read_bytes().decode()  # "\r" kept as written
    assert ("\rstep 2/10\ntorchboost doctor\nnext line\n" == text) is fresh, repr(text)


def test_a_line_open_on_another_file_is_not_ended_here(tmp_path, monkeypatch):
    err, out = tmp_path / "err.txt", tmp_path / "out.txt"
    with err.open("w") as err_file, out.open("w") as out_file:  # 2> err.txt > out.txt
        monkeypatch.setattr(sys, "stdout", out_file)
        monkeypatch.setattr(sys, "stderr", err_file)
        with line_ends_tracked():
            sys.stderr.write("\rstep 2/10")
            console().print("torchboost doctor")
        assert sys.stdout is out_file and sys.stderr is err_file  # the originals again
    assert out.read_text() == "torchboost doctor\n" and err.read_bytes() == b"\rstep 2/10"


@pytest.mark.slow
def test_doctors_panel_starts_on_a_fresh_line_after_the_scripts_bar(tmp_path):
    """End to end, through a pipe both streams share (the in-process test above has the
    twin: a console that does not look glues the panel to the bar)."""
    argv = [sys.executable, "-m", "torchboost.cli", "doctor", "--steps", "5", "--warmup", "2",
            "--out", str(tmp_path / "r"), "--", "python", str(SCRIPTS / "progress_bar.py"), "--steps", "6"]
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout
    bar = next(line for line in proc.stdout.splitlines() if "training done, 6 steps" in line)
    assert bar.endswith("training done, 6 steps"), repr(bar)  # nothing of torchboost's glued to it
    panel = next(line for line in proc.stdout.splitlines() if " torchboost doctor " in line)
    assert panel.startswith("─"), repr(panel)
