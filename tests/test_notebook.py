"""torchboost.doctor in a notebook: a real kernel runs tests/data/notebook_doctor.ipynb, whose
cell trains a small model, and the report matches the command's on the same loop as a
script (steps, top finding, each phase's share within 15 points); everything is put back
and the loop trains on. The in-process quick switches are measured there too. The cell
shows none of the profiler's own lines, and no call leaves anything to run at exit."""

from __future__ import annotations

import atexit
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchboost

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "tests" / "data" / "notebook_doctor.ipynb"
SHARE_POINTS = 15.0
"""How far a phase's share of the step may be from the command's, in percentage points."""
STEPS = ("--steps", "12", "--warmup", "3")  # what the notebook's doctor call asks for


def _run_notebook(folder: Path) -> tuple[dict, list[dict], str]:
    """Execute the notebook in a fresh kernel with ``folder`` as its working folder: the
    JSON its last cell prints, the outputs of the doctor's cell, and the text every cell showed."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # ipykernel shows what is written to the kernel's descriptors 1 and 2 in the cells,
    # except under pytest (PYTEST_CURRENT_TEST): without it, the cells show what a user's do.
    env = {name: value for name, value in os.environ.items() if name != "PYTEST_CURRENT_TEST"}
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}}).execute(env=env)
    printed = "".join(out.get("text", "") for out in notebook.cells[-1].outputs if out.get("name") == "stdout")
    streams = "".join(out.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for out in cell.outputs)
    return json.loads(printed.strip().splitlines()[-1]), notebook.cells[-2].outputs, streams


def _as_script(folder: Path, edit=lambda source: source) -> Path:
    """The notebook's loop as a script: its first code cell, then ``train(model, loader)``."""
    import nbformat

    cell = next(c for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code")
    script = folder / "train.py"
    script.write_text(edit(cell.source) + '\n\n\nif __name__ == "__main__":\n    train(model, loader)\n')
    return script


def _command_report(folder: Path, script: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "torchboost", "doctor", *STEPS, "--json", "--out",
                           str(folder / "command"), "--", "python", str(script)],
                          cwd=folder, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    return {"steps": report["steps_observed"], "breakdown_pct": report["breakdown_pct"],
            "top_finding": report["findings"][0]["id"] if report["findings"] else None}


def _mismatches(notebook: dict, command: dict) -> list[str]:
    """What differs beyond the bounds between the notebook's report and the command's."""
    out = [f"{key}: {notebook[key]} vs {command[key]}" for key in ("steps", "top_finding")
           if notebook[key] != command[key]]
    out += [f"{phase}: {share:.1f}% vs {command['breakdown_pct'][phase]:.1f}%"
            for phase, share in notebook["breakdown_pct"].items()
            if abs(share - command["breakdown_pct"][phase]) > SHARE_POINTS]
    return out


@pytest.mark.slow
def test_a_kernel_runs_the_doctor_and_it_matches_the_command_on_the_same_loop(tmp_path):
    said, shown, streams = _run_notebook(tmp_path)
    assert "profiler_start" not in streams and "profiler_stop" not in streams  # in profiler.log, not the cells
    assert said["restored"] and said["hooks_left"] == 0 and said["threads_kept"] and said["grad_enabled"]
    assert said["text_starts"].startswith("─") and "torchboost doctor" in said["text_starts"]
    html = [out["data"]["text/html"] for out in shown if "text/html" in out.get("data", {})]
    assert len(html) == 1 and html[0].startswith("<iframe srcdoc=")  # Jupyter shows the report's HTML, once
    assert (tmp_path / "torchboost-doctor" / "report.json").is_file()
    command = _command_report(tmp_path, _as_script(tmp_path))
    assert _mismatches(said, command) == [], (said, command)
    # The twin: the same comparison against a loop whose samples cost nothing fails it.
    quick = _command_report(tmp_path, _as_script(tmp_path, lambda source: source.replace("time.sleep(0.0005)", "")))
    assert _mismatches(said, quick) != []


def test_the_doctor_in_this_process_measures_a_debug_switch_and_puts_it_back(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(4)])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def train(steps: int = 200) -> str:
        for _ in range(steps):
            model(torch.randn(32, 64)).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        return "ran to its end"

    with torch.autograd.set_detect_anomaly(True):  # the loop's own setting, left on
        report = torchboost.doctor(train, steps=6, warmup=2, out=tmp_path / "doctor")
        assert torch.is_anomaly_enabled()  # the probe switched it off and on again
    anomaly = next(f for f in report.findings if f.id == "debug.anomaly")
    assert anomaly.measured is not None and anomaly.measured.ratio > 0  # timed against plain steps, in-process
    assert report.steps == 6 and report.result is None  # stopped: the function did not return
    assert (tmp_path / "doctor" / "report.html").is_file() and "debug.anomaly" in str(report)


def test_twin_a_function_that_ends_first_is_reported_finished_with_its_result(tmp_path):
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def train(steps: int) -> str:
        for _ in range(steps):
            model(torch.randn(4, 8)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        return "ran to its end"

    report = torchboost.doctor(train, 9, steps=3, warmup=1, out=tmp_path / "doctor")
    assert report.result == "ran to its end" and report.report["ended"] == "finished"
    with pytest.raises(torchboost.notebook.NothingToDiagnose, match="never called optimizer.step"):
        torchboost.doctor(lambda: None, out=tmp_path / "none")


def test_the_functions_own_error_is_raised_after_the_observer_is_off(tmp_path):
    from torchboost.observe.hooks.instrument import PATCHED_ATTRIBUTES

    before = [getattr(owner, name) for owner, name in PATCHED_ATTRIBUTES]

    def broken() -> None:
        raise ValueError("the loop's own error")

    with pytest.raises(ValueError, match="the loop's own error"):
        torchboost.doctor(broken, out=tmp_path / "doctor")
    assert [getattr(owner, name) for owner, name in PATCHED_ATTRIBUTES] == before


@pytest.mark.parametrize("fn, kwargs, error, words", [
    ("train.py", {}, TypeError, "fn must be the function that trains"),
    (print, {"steps": 0}, ValueError, "doctor(..., steps=0): at least 1"),
    (print, {"warmup": -1}, ValueError, "doctor(..., warmup=-1): at least 0"),
    (print, {"steps": 2.5}, TypeError, "steps=): a whole number of steps"),
])
def test_bad_arguments_are_refused_in_the_calls_own_words_before_anything_runs(tmp_path, fn, kwargs, error, words):
    """Not a bare "'str' object is not callable" from inside the observer, nor the command's
    "--steps must be at least 1". Twin: the same call with good arguments runs (the tests above)."""
    import torchboost

    with pytest.raises(error, match=re.escape(words)):
        torchboost.doctor(fn, out=tmp_path / "doc", **kwargs)
    assert not (tmp_path / "doc").exists()


def test_an_out_folder_of_the_users_is_refused_before_anything_runs(tmp_path):
    """A notebook's ``out=`` is held to the command's ``--out`` rule: the user's results folder
    is refused, its files as they were. Twin: the same folder once empty is taken."""
    import torchboost

    results = tmp_path / "results"
    results.mkdir()
    (results / "ckpt.pt").write_bytes(b"the user's")
    with pytest.raises(ValueError, match=r"out .*results: holds files torchboost did not write \(ckpt.pt\)"):
        torchboost.doctor(_small_loop(), out=results, steps=2, warmup=0)
    assert [p.name for p in results.iterdir()] == ["ckpt.pt"] and (results / "ckpt.pt").read_bytes() == b"the user's"
    (results / "ckpt.pt").unlink()
    report = torchboost.doctor(_small_loop(), out=results, steps=2, warmup=0)
    assert report.paths["json"].parent == results and (results / ".torchboost").is_file()


def _small_loop():
    """A function that trains a small model for as many steps as it is given."""
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def train(steps: int = 100) -> None:
        for _ in range(steps):
            model(torch.randn(8, 16)).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()

    return train


@pytest.mark.parametrize("sorted_out", [True, False])
def test_the_profilers_own_lines_go_to_profiler_log_not_the_cell(tmp_path, capfd, sorted_out):
    """Kineto writes ``USDT: ... profiler_start`` and ``profiler_stop`` straight to descriptor 2,
    which a notebook's cell shows: the doctor's call leaves them in profiler.log, as the
    command does. Twin: the same profiler window, its output left where it is written (as in
    the command's child, whose parent sorts it), prints them."""
    if sorted_out:
        torchboost.doctor(_small_loop(), steps=3, warmup=1, out=tmp_path / "doctor")
    else:
        from torchboost.observe.probes.profile import ProfileWindow

        window, train = ProfileWindow(tmp_path / "trace.json"), _small_loop()
        window.start()
        while not window.step():
            train(1)
    _, err = capfd.readouterr()
    assert ("profiler_start" in err or "profiler_stop" in err) is not sorted_out, err[-2000:]
    if sorted_out:
        assert "profiler_start" in (tmp_path / "doctor" / "profiler.log").read_text()


@pytest.mark.parametrize("left", [0, 1])
def test_repeated_calls_leave_nothing_to_run_at_exit(tmp_path, monkeypatch, left):
    """Three more calls, three more cells: no handler more for the interpreter's exit (the
    first call's imports register the libraries' own, once). Twin: a call that leaves one
    behind is counted."""
    train = _small_loop()
    torchboost.doctor(train, steps=3, warmup=1, out=tmp_path / "first")
    if left:
        from torchboost.observe.child import here

        def leaves_one(*args, **kwargs):
            atexit.register(print, "left behind")
            return observe_call(*args, **kwargs)

        observe_call = here.observe_call
        monkeypatch.setattr(torchboost.notebook, "observe_call", leaves_one)
    before = atexit._ncallbacks()
    for call in range(3):
        torchboost.doctor(train, steps=3, warmup=1, out=tmp_path / f"call{call}")
    added = atexit._ncallbacks() - before
    if left:
        atexit.unregister(print)
    assert added == 3 * left
