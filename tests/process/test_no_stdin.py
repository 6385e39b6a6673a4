"""doctor and tune give the script no stdin and say so when it asks; run gives it stdin as python does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from torchboost.process.no_stdin import stdin_words
from torchboost.tune.trials.trial import failure_words

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
INPUT_AT_EOF = ('Traceback (most recent call last):\n  File "train.py", line 5, in <module>\n'
                '    answer = input("continue? ")\nEOFError: EOF when reading a line\n')


@pytest.mark.parametrize("tail, named", [
    (INPUT_AT_EOF, True),
    ("Traceback (most recent call last):\nEOFError: Ran out of input\n", False),  # pickle's, not input()'s
    ("Traceback (most recent call last):\nRuntimeError: boom\n", False),
    ("", False),
])
def test_only_inputs_eof_is_named_a_read_from_stdin(tail, named):
    assert (stdin_words(tail) is not None) is named
    assert ("tried to read from stdin" in failure_words(None, 1, tail, "no training step completed")) is named


@pytest.mark.slow
def test_doctor_says_the_script_asked_for_stdin_and_run_gives_it(tmp_path):
    script = str(SCRIPTS / "reads_stdin.py")
    doctor = subprocess.run([sys.executable, "-m", "torchboost.cli", "doctor", "--steps", "5", "--warmup", "2",
                             "--out", str(tmp_path / "report"), "--", "python", script],
                            input="y\n", capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert doctor.returncode == 1 and "read: y" not in doctor.stdout  # our stdin never reaches it
    assert "EOFError" in doctor.stderr
    assert "torchboost doctor: the script tried to read from stdin (input()), which torchboost does not give it" \
        in doctor.stderr
    # The twin: under torchboost run, as under python, the script reads its stdin and trains.
    (tmp_path / "torchboost.toml").write_text("[cpu]\nthreads = 1\n")
    run = subprocess.run([sys.executable, "-m", "torchboost.cli", "run", "--", "python", script],
                         input="y\n", capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert run.returncode == 0 and "read: y" in run.stdout, run.stderr
    assert "tried to read from stdin" not in run.stderr
