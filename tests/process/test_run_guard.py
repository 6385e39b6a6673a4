"""Many runs' writes summed for tune's report (the ledger each guarded run adds to)."""

from __future__ import annotations

import json
from pathlib import Path

from torchboost.process.guard.run_guard import summed_writes


def _run(tmp_path, folder: str, not_restored: list[dict] | None = None) -> dict:
    return {"writes_dir": "torchboost-tune/trials/current/writes", "restored": ["ckpt.pt"], "note": None,
            "kept_apart": [
                {"path": "ckpt.pt", "times": 3, "moved_to": "x", "new": False, "entries": 1},
                {"path": f"runs/{folder}", "times": 3, "moved_to": "y", "new": True, "entries": 2},
            ], "not_restored": not_restored or []}


def test_every_run_is_summed_and_a_new_folder_per_run_is_one_entry(tmp_path):
    ledger = tmp_path / "writes.jsonl"
    ledger.write_text("".join(json.dumps(_run(tmp_path, str(t))) + "\n" for t in (1, 2, 3)))
    summed = summed_writes(ledger)
    assert summed["runs"] == 3
    assert {p["path"]: (p["times"], p["runs"]) for p in summed["paths"]} == {"ckpt.pt": (9, 3), "runs/…": (9, 3)}
    assert summed["line"].startswith("your folders: in 3 runs the script wrote ckpt.pt (9 times in 3 runs)")
    assert summed["line"].endswith("your files are as they were")


def test_a_new_folder_made_in_the_users_folder_itself_is_named(tmp_path):
    # torchrun ranks writing out/rank0.json and out/rank1.json: "out/…", not a bare "…"
    ledger = tmp_path / "writes.jsonl"
    run = {"writes_dir": "w", "restored": [], "note": None, "not_restored": [],
           "kept_apart": [{"path": "out", "times": 2, "moved_to": "x", "new": True, "entries": 3}]}
    ledger.write_text((json.dumps(run) + "\n") * 2)
    summed = summed_writes(ledger)
    assert [p["path"] for p in summed["paths"]] == ["out/…"]
    assert "the script wrote out/… (4 times in 2 runs)" in summed["line"]


def test_twin_a_file_changed_outside_python_is_named_not_restored(tmp_path):
    ledger = tmp_path / "writes.jsonl"
    bad = [{"path": "train.log", "why": "changed outside Python"}]
    ledger.write_text(json.dumps(_run(tmp_path, "1")) + "\n" + json.dumps(_run(tmp_path, "2", bad)) + "\n")
    line = summed_writes(ledger)["line"]
    assert "NOT restored: train.log (changed outside Python)" in line and "as they were" not in line


def test_no_ledger_no_summary(tmp_path):
    assert summed_writes(tmp_path / "absent.jsonl") is None


def test_a_small_file_changed_outside_python_is_put_back_from_its_copy(tmp_path, monkeypatch):
    from torchboost.process.guard.guard_spec import note_held
    from torchboost.process.guard.run_guard import INSURED_FILE_BYTES, RunGuard

    user = tmp_path / "project"
    user.mkdir()
    (user / "train.log").write_text("the user's log\n")
    big = user / "data.bin"
    big.write_bytes(b"\0" * (INSURED_FILE_BYTES + 1))
    monkeypatch.chdir(user)
    guard = RunGuard(user / "torchboost-doctor", None)
    # Writers the guard does not see (no guard in this process): a shell's ">>" on the
    # script's standard output, which a process of the run holds (and names) when it starts.
    with open(user / "train.log", "a") as fh:
        note_held(guard.journal_dir, 4242)
        fh.write("a line from the wrapper\n")
    with open(big, "r+b") as fh:
        fh.write(b"\1")
    writes = guard.settle()
    assert (user / "train.log").read_text() == "the user's log\n"  # put back from the copy made before the run
    assert "train.log" in writes.restored and any(w.path == "train.log" for w in writes.kept_apart)
    # The twin: a file over the copied size changed the same way cannot be put back, and is named.
    assert [n.path for n in writes.not_restored] == ["data.bin"]
    assert "changed outside torchboost's sight: data.bin" in writes.words() and "by you" not in writes.words()


def test_a_small_file_rewritten_outside_python_is_left_as_the_user_made_it(tmp_path, monkeypatch):
    """Someone edits a file of theirs while the run goes on (nothing of the run's Python wrote
    it): the edit stays, and the file is named; a file removed behind the guard's back comes
    back. Twin of the append above, which is put back."""
    from torchboost.process.guard.run_guard import REWRITTEN, RunGuard

    user = tmp_path / "project"
    user.mkdir()
    (user / "train.py").write_text("print('old')\n")
    (user / "notes.md").write_text("notes\n")
    monkeypatch.chdir(user)
    guard = RunGuard(user / "torchboost-doctor", None)
    (user / "train.py").write_text("print('the edit the user saved meanwhile')\n")
    (user / "notes.md").unlink()
    writes = guard.settle()
    assert (user / "train.py").read_text() == "print('the edit the user saved meanwhile')\n"
    assert [(n.path, n.why) for n in writes.not_restored] == [("train.py", REWRITTEN)]
    assert (user / "notes.md").read_text() == "notes\n" and "notes.md" in writes.restored


def test_a_line_the_user_appends_to_their_script_meanwhile_stays(tmp_path, monkeypatch):
    """The user appends a line to train.py while a tune runs: it grew with its old content
    whole at its start, like a wrapper's log, but no process of the run held it open, so it
    is left as the user made it and named. Twin: the held log above is put back."""
    from torchboost.process.guard.run_guard import GREW, RunGuard

    user = tmp_path / "project"
    user.mkdir()
    (user / "train.py").write_text("print('old')\n")
    monkeypatch.chdir(user)
    guard = RunGuard(user / "torchboost-doctor", None)
    with open(user / "train.py", "a") as fh:
        fh.write("# EDIT-1\n")
    writes = guard.settle()
    assert (user / "train.py").read_text() == "print('old')\n# EDIT-1\n"
    assert [(n.path, n.why) for n in writes.not_restored] == [("train.py", GREW)]


def test_a_project_inside_the_temp_directory_is_guarded_like_any_other(tmp_path, monkeypatch):
    """A shell's ``>> run.out`` makes a file no Python hook sees, in a project that lies in
    the temp directory (scratch space): it is the run's, moved into the writes folder, not
    left behind under "your files are as they were". Twin: the report folder inside the
    project is guarded too but for torchboost's own entries in it: the facts the run writes
    there stay, a file of another name is the script's, kept apart."""
    import tempfile

    from torchboost.process.guard.run_guard import RunGuard

    user = tmp_path / "project"
    user.mkdir()
    assert str(user.resolve()).startswith(str(Path(tempfile.gettempdir()).resolve()))
    monkeypatch.chdir(user)
    out = user / "torchboost-doctor"
    guard = RunGuard(out, None, own=("facts*.json",))
    (user / "run.out").write_text("profiler_start\n")  # no guard in this process: as a shell writes it
    (out / "facts.json").write_text("{}")
    (out / "report.json").write_text("{}")
    writes = guard.settle()
    assert not (user / "run.out").exists()
    assert any(w.path == "run.out" and w.new for w in writes.kept_apart)
    assert (out / "facts.json").exists() and not any("facts.json" in w.path for w in writes.kept_apart)
    assert not (out / "report.json").exists()
    assert any(w.path == "torchboost-doctor/report.json" and w.new for w in writes.kept_apart)
