"""Compiling is not stalling: the stack check, the watchdog's clock, the progress line."""

from __future__ import annotations

import json
import threading

import pytest
import torch._dynamo  # noqa: F401 - compiling_now looks only once Dynamo is imported

from torchboost.observe import ObserveSpec, StepRecorder
from torchboost.observe.child.compiling import compiling_now
from torchboost.observe.child.watchdog import COMPILE_LIMIT_S, StallWatchdog


def _parked_in(path: str, function: str = "compile_it") -> tuple[threading.Thread, threading.Event]:
    """A thread waiting inside ``function`` of a code object named as the file ``path``."""
    source = f"def {function}(event):\n    event.wait(30)\n"
    namespace: dict = {}
    exec(compile(source, path, "exec"), namespace)
    release = threading.Event()
    thread = threading.Thread(target=namespace[function], args=(release,), daemon=True)
    thread.start()
    return thread, release


@pytest.mark.parametrize("path, function, compiling", [
    ("/site/torch/_dynamo/convert_frame.py", "compile_it", True),  # Dynamo tracing a frame
    ("/site/torch/_inductor/compile_fx.py", "compile_it", True),  # Inductor generating code
    ("/site/torch/_functorch/_aot_autograd/runtime_wrappers.py", "_backward_impl", True),  # lazy backward
    # Twins: what a compiled model runs through at every call once compiled is not compiling.
    ("/site/torch/_dynamo/eval_frame.py", "compile_it", False),
    ("/site/torch/_functorch/_aot_autograd/runtime_wrappers.py", "forward", False),
    ("/site/torch/_inductor/output_code.py", "compile_it", False),
])
def test_a_thread_inside_a_compiling_function_is_compiling(path, function, compiling):
    assert not compiling_now()
    thread, release = _parked_in(path, function)
    try:
        assert compiling_now() is compiling
    finally:
        release.set()
        thread.join()


def _watchdog(tmp_path) -> tuple[StallWatchdog, StepRecorder]:
    spec = ObserveSpec(out_dir=str(tmp_path), progress_path=str(tmp_path / "progress.json"), profile_active=0)
    recorder = StepRecorder(spec, clock=lambda: 0.0)
    return StallWatchdog(recorder, timeout_s=5.0), recorder


def test_compiling_seconds_are_excused_and_shown_until_the_next_boundary(tmp_path):
    watchdog, recorder = _watchdog(tmp_path)
    for _ in range(20):
        watchdog.tick(0.5, compiling=True)
    assert watchdog.compiling_s == pytest.approx(10.0)
    line = json.loads((tmp_path / "progress.json").read_text())
    assert line["compiling_s"] == 10 and line["stage"] == "warm-up"
    watchdog.tick(0.5, compiling=False)  # the compile ended: the line stops saying so at once
    assert "compiling_s" not in json.loads((tmp_path / "progress.json").read_text())
    assert watchdog.compiling_s == pytest.approx(10.0) and watchdog.compile_streak_s == 0.0
    recorder.timing.last_boundary = 42.0  # a step boundary: the excuse is spent
    watchdog.tick(0.5, compiling=False)
    assert watchdog.compiling_s == 0.0


def test_an_unbroken_compile_is_bounded_and_a_broken_one_restarts_the_streak(tmp_path):
    watchdog, _ = _watchdog(tmp_path)
    watchdog.tick(COMPILE_LIMIT_S - 1, compiling=True)
    watchdog.tick(0.5, compiling=False)  # between two frames' compiles
    watchdog.tick(2.0, compiling=True)
    assert watchdog.compile_streak_s == 2.0 and watchdog.compiling_s == COMPILE_LIMIT_S + 1
    watchdog.tick(COMPILE_LIMIT_S, compiling=True)
    assert watchdog.compile_streak_s > COMPILE_LIMIT_S


def test_the_progress_line_says_compiling_only_while_it_is():
    from torchboost.observe.parent.supervise import Progress

    assert Progress("warm-up", 0, 5, compiling_s=41.6).words() == "compiling (42 s so far), warm-up step 0/5"
    assert Progress("warm-up", 1, 5).words() == "warm-up step 1/5"  # twin: no compile, no word of it


def test_a_process_of_a_tree_is_no_stall_until_it_trains(tmp_path):
    spec = ObserveSpec(out_dir=str(tmp_path), profile_active=0)
    recorder = StepRecorder(spec, clock=lambda: 0.0)
    watchdog = StallWatchdog(recorder, timeout_s=5.0, after_first_step=True)
    assert watchdog.idle_s(600.0) is None  # a launcher that imported torch ten minutes ago
    recorder.data_begin()  # its loop asks for its first batch
    assert watchdog.idle_s(601.0) == 0.0
    assert watchdog.idle_s(611.0) == 10.0  # from when it began to train, not from torch's import


def test_twin_the_observed_script_itself_counts_from_its_start(tmp_path):
    spec = ObserveSpec(out_dir=str(tmp_path), profile_active=0)
    watchdog = StallWatchdog(StepRecorder(spec, clock=lambda: 0.0), timeout_s=5.0)
    assert watchdog.idle_s(600.0) == 600.0
