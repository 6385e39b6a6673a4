"""The line sampler: the host's time given to the user's own line, checked against a busy-wait
of known length at a known line (and its twin, the same wait at another line)."""

from __future__ import annotations

import gc
import inspect
import subprocess
import sys
import time

import pytest

from torchboost.evidence.host_lines import HostLine, line_rows
from torchboost.observe.record.line_sampler import LineSampler, users_file


def _step_spinning_here(ms: float) -> None:
    end = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < end:  # THE LINE
        pass


def _step_spinning_elsewhere(ms: float) -> None:
    end, spins = time.perf_counter() + ms / 1000.0, 0
    while time.perf_counter() < end:  # THE OTHER LINE
        spins += 1


def _spin(ms: float) -> None:
    _step_spinning_here(ms)


def _line_of(fn, marker: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if marker in text)


def _sampled(step, steps: int = 8, ms: float = 30.0) -> list[HostLine]:
    sampler = LineSampler(lambda: "other", interval_ms=2.0).start()
    for i in range(steps):
        step(ms)
        sampler.close_step(i, kept=True, next_recorded=True)
    sampler.stop()
    return sampler.lines()


@pytest.mark.parametrize("step, marker", [(_step_spinning_here, "THE LINE"), (_step_spinning_elsewhere, "THE OTHER LINE")])
def test_the_time_goes_to_the_line_that_spent_it(step, marker):
    """A 30 ms busy-wait a step at one line: most of the sampled time is that line's (this
    file's, as the user's code), and the twin's wait is at its own line, not the first."""
    lines = _sampled(step)
    rows = line_rows(lines, list(range(8)), 30.0, share_pct=0.0)
    top = rows[0]  # the innermost line of the user's code: the wait's, reached from the loop's line
    assert top["file"] == __file__ and top["line"] == _line_of(step, marker) and top["via"].startswith("test_line")
    assert top["ms"] >= 0.6 * sum(row["ms"] for row in rows)  # the wait dominates what was sampled
    other = "THE OTHER LINE" if marker == "THE LINE" else "THE LINE"
    twin = _step_spinning_elsewhere if step is _step_spinning_here else _step_spinning_here
    assert all(row["line"] != _line_of(twin, other) for row in rows)


def test_a_call_into_c_is_named_by_its_line_and_a_library_call_by_its_function():
    """``gc.collect()`` has no frame of its own: the line's text names it; a call into a
    library is named by the library's function."""
    import json

    kept = [{"i": i} for i in range(300_000)]  # live objects, for the collection to walk (tens of ms)

    def step(ms: float) -> None:
        gc.collect()  # C
        json.dumps([{"i": i} for i in range(100_000)], indent=1)  # a library's Python (tens of ms)

    rows = line_rows(_sampled(step, steps=5), list(range(5)), 10.0, share_pct=0.0)
    assert any(row["code"] == "gc.collect()  # C" and row["callee"] == "" for row in rows)
    assert any(row["callee"].startswith("json") for row in rows)
    assert kept


def test_only_the_users_files_are_theirs():
    import json

    assert users_file(__file__) == __file__
    assert users_file(json.__file__) is None and users_file("<frozen importlib._bootstrap>") is None
    assert users_file(inspect.getfile(LineSampler)) is None  # torchboost's own


def test_dropped_steps_and_paused_sampling_keep_nothing():
    sampler = LineSampler(lambda: "other", interval_ms=2.0).start()
    _spin(20)
    sampler.close_step(0, kept=False, next_recorded=False)  # a warm-up step, and a profiled one next
    _spin(20)
    sampler.close_step(1, kept=True, next_recorded=True)
    sampler.stop()
    assert all(set(line.ms_by_step) <= {1} and sum(line.ms_by_step.values()) < 10 for line in sampler.lines())


def _train_step(sampler: LineSampler | None, i: int, evaluate_inside: bool) -> LineSampler:
    """A step function the loop calls: the step's boundary (the sampler's start, its
    close) is reached in here, as an ``optimizer.step()`` would be."""
    if evaluate_inside:
        _spin(20)  # EVALUATED IN THE STEP
    if sampler is None:
        return LineSampler(lambda: "other", interval_ms=2.0).start()
    sampler.close_step(i, kept=True, next_recorded=True)
    return sampler


def _loop_calling_a_step_function(evaluate_inside: bool) -> list[HostLine]:
    sampler = None
    for i in range(8):
        sampler = _train_step(sampler, i, evaluate_inside)
        if not evaluate_inside:
            _spin(20)  # THE LOOP'S EVALUATION CALL
    sampler.stop()
    return sampler.lines()


@pytest.mark.parametrize("evaluate_inside, marker", [(False, "THE LOOP'S EVALUATION CALL"),
                                                      (True, "EVALUATED IN THE STEP")])
def test_a_line_reached_from_the_loop_names_the_loops_line_where_the_step_is_a_function(evaluate_inside, marker):
    """A loop that calls ``train_step()`` each step and an evaluation beside it: the
    evaluation's time is named with the loop's line that called it, not left without one
    because the step's boundary is inside ``train_step``. Twin: the same wait called from
    inside the step function names the step function's line."""
    rows = line_rows(_loop_calling_a_step_function(evaluate_inside), list(range(1, 8)), 20.0, share_pct=0.0)
    top = rows[0]
    where = _loop_calling_a_step_function if not evaluate_inside else _train_step
    assert top["line"] == _line_of(_step_spinning_here, "THE LINE")
    assert top["via"] == f"test_line_sampler.py:{_line_of(where, marker)}"


SCRIPT = """\
import time, torch
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
def spin(ms):
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass
for step in range(200):
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
    spin(40)  # the host's work, 40 ms a step
"""


@pytest.mark.slow
def test_the_doctor_names_a_known_busy_wait_at_its_line(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    done = subprocess.run([sys.executable, "-m", "torchboost.cli", "doctor", "--json", "--", "python", "train.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = __import__("json").loads(done.stdout)
    shown = report["host_lines"]["shown"]
    assert shown[0]["bucket"] == "other" and shown[0]["where"] == "train.py:6" and shown[0]["via"] == "train.py:12"
    assert 0.5 < shown[0]["ms"] / 40.0 < 1.5  # sampled, against the wait's own length
    assert shown[0]["ms"] <= report["phase_ms"]["other"] + 1e-6  # a phase's lines add up to at most its row
    assert any(f["id"] == "host.line" and "train.py:6" in f["title"] and "train.py:12" in f["title"]
               for f in report["findings"])
