"""The relay's noise filter: the profiler's lines taken out, and a long line never held or rescanned;
in the user's own process, around each call of the profiler, the same."""

from __future__ import annotations

import contextlib
import os

import pytest

from torchboost.process import relay
from torchboost.process.relay import NoiseFilter, split_noise

USDT = "USDT: [2024-01-01 00:00:00] profiler_start"
LONG_LINE = "config=" + "x" * 150_000 + "\n"


def _feed(noise_log, text: str, chunk: int = 65536) -> tuple[str, int]:
    """Feed ``text`` in ``chunk``-sized pieces; (what came out, the most ever held back)."""
    lines, out, held = NoiseFilter(noise_log), [], 0
    for start in range(0, len(text), chunk):
        out.append(lines.feed(text[start:start + chunk], final=False))
        held = max(held, lines.held_chars)
    out.append(lines.feed("", final=True))
    return "".join(out), held


def test_split_noise_takes_the_profilers_messages_out_of_a_line():
    assert split_noise(f"epoch 1 {USDT}\n") == ("epoch 1 \n", [USDT])
    assert split_noise(f"{USDT}\n") == ("", [USDT])  # a line of noise alone leaves nothing
    # The twin: a line that only mentions the words is the script's own and stays.
    assert split_noise("USDT: profiler_start was slow\n") == ("USDT: profiler_start was slow\n", [])


def test_profiler_lines_go_to_the_log_even_split_across_pieces(tmp_path):
    log = tmp_path / "profiler.log"
    text = "loss 0.5\n" + "progress 10%\rprogress 20%\r" + USDT + "\n" + "loss 0.4\n"
    out, _ = _feed(log, text, chunk=7)  # the profiler's line arrives in pieces
    assert out == "loss 0.5\nprogress 10%\rprogress 20%\rloss 0.4\n"
    assert log.read_text() == USDT + "\n"


def test_a_long_line_goes_on_whole_and_is_never_held_or_scanned_whole(tmp_path, monkeypatch):
    scanned = []
    monkeypatch.setattr(relay, "split_noise", lambda line: (scanned.append(len(line)), split_noise(line))[1])
    out, held = _feed(tmp_path / "profiler.log", "before\n" + LONG_LINE + "after\n")
    assert out == "before\n" + LONG_LINE + "after\n"  # nothing lost, in order
    assert held <= NoiseFilter.MAX_LINE_CHARS
    assert max(scanned) <= NoiseFilter.MAX_LINE_CHARS


def test_the_old_unbounded_hold_fails_the_bound(tmp_path, monkeypatch):
    """The broken twin: with no bound (the old relay held any unfinished line and rescanned
    it at every piece), the 150 KB line is held whole and scanned whole."""
    monkeypatch.setattr(NoiseFilter, "MAX_LINE_CHARS", 10**9)
    scanned = []
    monkeypatch.setattr(relay, "split_noise", lambda line: (scanned.append(len(line)), split_noise(line))[1])
    out, held = _feed(tmp_path / "profiler.log", "before\n" + LONG_LINE + "after\n")
    assert out == "before\n" + LONG_LINE + "after\n"
    assert held > 100_000 and max(scanned) > 100_000


def test_a_line_ending_in_the_middle_of_a_piece_after_a_long_line(tmp_path):
    log = tmp_path / "profiler.log"
    text = "x" * 9000 + "\n" + USDT + "\nloss 1\n" + "y" * 5000  # the last line never ends
    out, held = _feed(log, text, chunk=4000)
    assert out == "x" * 9000 + "\nloss 1\n" + "y" * 5000
    assert held <= NoiseFilter.MAX_LINE_CHARS and log.read_text() == USDT + "\n"


@pytest.mark.parametrize("held", [True, False])
def test_around_a_call_of_the_profiler_in_this_process_its_lines_go_to_the_log(tmp_path, capfd, held):
    """What is written straight to descriptors 1 and 2 meanwhile (as Kineto's C++ writes)
    is sorted after: the profiler's line to the log, the rest on to its own descriptor.
    Twin: unheld, the profiler's line reaches descriptor 2."""
    log = tmp_path / "profiler.log"
    with relay.profiler_lines_to(log) if held else contextlib.nullcontext():
        os.write(2, f"{USDT}\nits own warning\n".encode())
        os.write(1, b"its own output\n")
    out, err = capfd.readouterr()
    assert out == "its own output\n" and "its own warning\n" in err
    assert ("profiler_start" in err) is not held
    assert (log.read_text() if log.exists() else "") == (USDT + "\n" if held else "")


@pytest.mark.slow
@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_the_profilers_lines_are_taken_out_of_either_stream(tmp_path, capfd, stream):
    """A wrapper's ``2>&1 | tee log`` sends the script's stderr down its stdout: the
    profiler's lines go to the log from there too. The twin (stderr) was so before."""
    import collections
    import subprocess
    import sys

    code = f"import sys; sys.{stream}.write('loss 0.5\\n{USDT}\\nloss 0.4\\n')"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    log = tmp_path / "profiler.log"
    for thread in relay.start_relays(proc, collections.deque(), echo=True, stdout=None, noise_log=log):
        thread.join(timeout=30)
    proc.wait()
    out, err = capfd.readouterr()
    assert "loss 0.5\nloss 0.4\n" in (out if stream == "stdout" else err) and "USDT" not in out + err
    assert log.read_text() == USDT + "\n"
