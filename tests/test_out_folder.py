"""The report folder: torchboost writes only into a folder that is new, empty or its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from torchboost import out_folder
from torchboost.cli._lock import LOCK_NAME, folder_lock
from torchboost.usage import UsageError


def test_a_new_folder_is_made_and_marked_and_taken_again(tmp_path):
    folder = out_folder.claim(tmp_path / "reports" / "doctor")
    assert (folder / out_folder.MARKER).is_file() and (folder / ".gitignore").read_text().splitlines()[-1] == "*"
    (folder / "report.json").write_text("{}")  # its own report, from the first run
    assert out_folder.claim(folder) == folder  # marked: taken again, whatever it holds


def test_an_empty_folder_is_taken_and_a_default_name_from_before_the_marker_too(tmp_path):
    (tmp_path / "empty").mkdir()
    assert (out_folder.claim(tmp_path / "empty") / out_folder.MARKER).is_file()
    legacy = tmp_path / "torchboost-doctor"
    legacy.mkdir()
    (legacy / "report.json").write_text("{}")
    assert (out_folder.claim(legacy) / out_folder.MARKER).is_file()


def test_a_folder_of_the_users_is_refused_naming_what_it_holds_and_is_left_as_it_was(tmp_path):
    results = tmp_path / "results"
    (results / "writes").mkdir(parents=True)
    for name in ("ckpt.pt", "metrics.csv", "report.json"):
        (results / name).write_text(name)
    with pytest.raises(UsageError, match=r"--out .*results: holds files torchboost did not write \(ckpt.pt, "
                                         r"metrics.csv, report.json and 1 more\)"):
        out_folder.claim(results)
    assert sorted(p.name for p in results.iterdir()) == ["ckpt.pt", "metrics.csv", "report.json", "writes"]
    with pytest.raises(UsageError, match="a file, not a folder"):
        out_folder.check(results / "ckpt.pt")


def test_twin_a_marked_folder_with_the_same_files_is_taken(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "ckpt.pt").write_text("x")
    (results / out_folder.MARKER).write_text("")
    assert out_folder.claim(results) == results


def test_a_folder_made_for_a_refused_command_is_removed_but_one_that_was_there_stays(tmp_path):
    made, there = tmp_path / "made", tmp_path / "there"
    there.mkdir()
    for folder in (made, there):
        with pytest.raises(UsageError):
            with out_folder.made_for_this_command(folder):
                out_folder.claim(folder)
                raise UsageError("a later check failed")
    assert not made.exists() and there.is_dir()


def test_the_lock_file_goes_with_the_tune_that_held_it(tmp_path):
    with folder_lock(tmp_path):
        assert (tmp_path / LOCK_NAME).is_file()
    assert not (tmp_path / LOCK_NAME).exists()
    with pytest.raises(UsageError):  # the twin: held, it is there and refuses a second holder
        with folder_lock(tmp_path):
            assert (tmp_path / LOCK_NAME).is_file()
            with folder_lock(tmp_path):
                pass


def _cli(tmp_path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torchboost.cli", *argv], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.slow
def test_refused_commands_leave_no_report_folder(tmp_path):
    (tmp_path / "train.py").write_text("raise SystemExit('the script must not run')\n")
    (tmp_path / "bad.toml").write_text("[precision]\nmode = 'fp13'\n")
    (tmp_path / "notes.txt").write_text("not a trace\n")
    tune = _cli(tmp_path, "tune", "--config", "bad.toml", "--out", "t", "--", "python", "train.py")
    trace = _cli(tmp_path, "doctor", "--trace", "notes.txt", "--out", "d")
    for done in (tune, trace):
        assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert not (tmp_path / "t").exists() and not (tmp_path / "d").exists()
    trace = Path(__file__).resolve().parent / "data" / "hta" / "control.json.gz"
    ok = _cli(tmp_path, "doctor", "--trace", str(trace), "--out", "d")  # the twin: a trace it reads
    assert ok.returncode == 0 and (tmp_path / "d" / "report.json").is_file(), ok.stderr


def test_a_marked_folder_the_script_wrote_into_after_torchboost_is_refused(tmp_path):
    """``--out results`` while empty: torchboost's run ends and records the folder; the
    script's own run then writes ``results/report.json``: the next command refuses the
    folder. Twin: the folder as torchboost left it is taken again."""
    results = out_folder.claim(tmp_path / "results")
    with out_folder.in_use(results):
        (results / "report.json").write_text('{"torchboost": 1}')
        (results / "writes").mkdir()
    assert out_folder.claim(results) == results  # the twin: as torchboost left it
    (results / "report.json").write_text('{"the script": 1}')
    (results / "ckpt.pt").write_bytes(b"step 10")
    with pytest.raises(UsageError, match=r"torchboost made it, but ckpt.pt, report.json came or changed there"):
        out_folder.claim(results)


def test_a_marked_folder_whose_last_command_never_ended_is_taken_as_it_is(tmp_path):
    results = out_folder.claim(tmp_path / "results")
    with pytest.raises(KeyboardInterrupt):
        with out_folder.in_use(results):
            raise KeyboardInterrupt  # a stop the command sees: it still records the folder
    (results / "ckpt.pt").write_bytes(b"x")
    with pytest.raises(UsageError):
        out_folder.claim(results)
    (results / out_folder.MARKER).write_text('{"entries": null}')  # as a killed command leaves it
    assert out_folder.claim(results) == results


def test_a_file_made_deep_inside_a_marked_folder_after_torchboost_is_caught(tmp_path):
    """The script's own run writes ``results/writes/samples/mine.txt`` into a folder torchboost
    left: no top-level entry's time moves, and the next command would clear writes/. The
    folder is refused. Twin: untouched, it is taken."""
    results = out_folder.claim(tmp_path / "results")
    with out_folder.in_use(results):
        (results / "writes" / "samples").mkdir(parents=True)
        (results / "writes" / "samples" / "run.txt").write_text("the run's")
    assert out_folder.claim(results) == results
    (results / "writes" / "samples" / "mine.txt").write_text("the user's")
    with pytest.raises(UsageError, match="writes came or changed there"):
        out_folder.claim(results)
