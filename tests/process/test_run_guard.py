"""Many runs' writes summed for tune's report (the ledger each guarded run adds to)."""

from __future__ import annotations

import json
import os
import shutil
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
    assert summed["line"].endswith("your folders are as they were, and so is every file the run's Python changed elsewhere")


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


def test_runs_that_only_changed_files_out_of_sight_are_said_in_one_clean_line(tmp_path):
    ledger = tmp_path / "writes.jsonl"
    run = {"writes_dir": "w", "restored": [], "note": None, "kept_apart": [],
           "not_restored": [{"path": "results.json", "why": "changed outside torchboost's sight"}]}
    ledger.write_text((json.dumps(run) + "\n") * 2)
    line = summed_writes(ledger)["line"]
    assert line == "your folders: in 2 runs; changed outside torchboost's sight: results.json"
    assert "wrote ;" not in line and "wrote" not in line  # the twin below names writes where there were some


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
    the temp directory (scratch space): held open by the run's process, it is the run's,
    moved into the writes folder, not left behind under "your folders are as they were".
    The report folder inside the project is guarded too but for torchboost's own entries in
    it: the facts the run writes there stay, a file of another name is the script's, kept
    apart. Twin: a file no process of the run held is the user's, left where it is."""
    import tempfile

    from torchboost.process.guard.guard_spec import note_held
    from torchboost.process.guard.run_guard import RunGuard

    user = tmp_path / "project"
    user.mkdir()
    assert str(user.resolve()).startswith(str(Path(tempfile.gettempdir()).resolve()))
    monkeypatch.chdir(user)
    out = user / "torchboost-doctor"
    guard = RunGuard(out, None, own=("facts*.json",))
    with open(user / "run.out", "w") as redirect, open(out / "report.json", "w") as report:
        note_held(guard.journal_dir, 4242)  # a shell's redirection, held open by the run's process
        redirect.write("profiler_start\n")
        report.write("{}")
    (out / "facts.json").write_text("{}")
    (user / "notes.md").write_text("the user's, written meanwhile")  # the twin: no process of the run held it
    writes = guard.settle()
    assert not (user / "run.out").exists()
    assert any(w.path == "run.out" and w.new and w.seen for w in writes.kept_apart)
    assert (out / "facts.json").exists() and not any("facts.json" in w.path for w in writes.kept_apart)
    assert not (out / "report.json").exists()
    assert any(w.path == "torchboost-doctor/report.json" and w.new for w in writes.kept_apart)
    assert (user / "notes.md").read_text() == "the user's, written meanwhile"
    assert any(w.path == "notes.md" and not w.seen and w.moved_to is None for w in writes.kept_apart)


def _guarded_run(tmp_path, monkeypatch, out_rel: str, action, *, own: bool = True):
    """A RunGuard for ``tmp_path/project`` with its report folder at ``out_rel``, the write
    guard installed in this process around ``action()`` (as a script's own process would
    have it), then settled."""
    from torchboost.process.guard.guard_spec import WriteGuardSpec
    from torchboost.process.guard.run_guard import RunGuard
    from torchboost.process.guard.write_guard import WriteGuard

    project = tmp_path / "project"
    monkeypatch.chdir(project)
    guard = RunGuard(project / out_rel, project / "train.py")
    spec = WriteGuardSpec.from_dict(guard.spec())
    if not own:
        monkeypatch.setattr(WriteGuard, "_own_inside", lambda self, raw, dir_fd: None)
    with WriteGuard(spec):
        action()
    return guard.settle()


def test_a_tree_cleared_around_the_report_folder_keeps_the_users_files(tmp_path, monkeypatch):
    """The script starts with ``shutil.rmtree("outputs")`` and ``--out outputs/torchboost``:
    the report folder (and the originals kept in it) stays, the rest of the tree goes, and
    after the run every file of the user's is back. Twin: the tree removed whole, as it
    was, the originals go with it, and the user's files are lost."""
    for own in (True, False):
        base = tmp_path / str(own)
        (base / "project" / "outputs").mkdir(parents=True)
        (base / "project" / "outputs" / "ckpt.pt").write_bytes(b"step 200")
        (base / "project" / "outputs" / "emb").mkdir()
        (base / "project" / "outputs" / "emb" / "vectors.bin").write_bytes(b"\x01" * 4096)

        def action() -> None:
            shutil.rmtree("outputs")
            os.makedirs("outputs", exist_ok=True)
            Path("outputs/ckpt.pt").write_bytes(b"step 5")

        try:
            _guarded_run(base, monkeypatch, "outputs/torchboost", action, own=own)
        except OSError:
            assert not own  # the twin: the journal went with the tree
        kept = (base / "project" / "outputs" / "ckpt.pt").read_bytes() == b"step 200" and \
            (base / "project" / "outputs" / "emb" / "vectors.bin").exists()
        assert kept is own


def test_a_run_never_settled_is_settled_by_the_next_one_in_its_folder(tmp_path, monkeypatch):
    """torchboost killed (SIGKILL) after the script overwrote the user's checkpoint: the next
    run in the same report folder first puts the original back, and says so. Twin: the
    earlier journal cleared as it was, the user's checkpoint is the script's for good."""
    from torchboost.process.guard import run_guard as module
    from torchboost.process.guard.guard_spec import WriteGuardSpec
    from torchboost.process.guard.run_guard import RunGuard
    from torchboost.process.guard.write_guard import WriteGuard

    for twin in (False, True):
        project = tmp_path / str(twin) / "project"
        project.mkdir(parents=True)
        (project / "ckpt.pt").write_bytes(b"step 200")
        monkeypatch.chdir(project)
        first = RunGuard(project / "torchboost-doctor", project / "train.py")
        with WriteGuard(WriteGuardSpec.from_dict(first.spec())):
            (project / "ckpt.pt").write_bytes(b"step 40")
        # torchboost is killed here: no settle
        if twin:
            monkeypatch.setattr(module, "recover", lambda writes_dir, journal_dir: None)
        second = RunGuard(project / "torchboost-doctor", project / "train.py")
        second.settle()
        assert ((project / "ckpt.pt").read_bytes() == b"step 200") is not twin
        if not twin:
            assert "ended before it put your files back" in second.note and "ckpt.pt" in second.note


def test_an_entry_no_process_of_the_run_made_is_left_where_it_is_and_named(tmp_path, monkeypatch):
    """A file the user (or another program) creates in the folder while a tune runs is no
    write of the run's: it stays where it was made, named, where it was moved out before
    (and the next trial then deleted it). Twin: the run's own new file is moved out."""
    from torchboost.process.guard.guard_spec import WriteGuardSpec
    from torchboost.process.guard.run_guard import RunGuard
    from torchboost.process.guard.write_guard import WriteGuard

    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    out = project / "torchboost-tune"
    first = RunGuard(out, project / "train.py")
    (project / "my_notes.py").write_text("the user's, made during the run\n")  # no process of the run made it
    with WriteGuard(WriteGuardSpec.from_dict(first.spec())):
        (project / "run.log").write_text("the run's\n")
    writes = first.settle()
    assert (project / "my_notes.py").read_text() == "the user's, made during the run\n"
    assert "made outside torchboost's sight, left where it is: my_notes.py" in writes.words()
    assert not (project / "run.log").exists() and (out / "writes" / "run.log").read_text() == "the run's\n"
    RunGuard(out, project / "train.py").settle()  # the next trial clears the run's writes, not the user's file
    assert (project / "my_notes.py").exists() and not (out / "writes").exists()

def test_a_file_changed_after_the_killed_run_is_left_as_the_user_made_it(tmp_path, monkeypatch):
    """torchboost killed mid-run, then the user trains again (a new ckpt.pt) before the next
    doctor: that ckpt.pt is theirs, not the killed run's, and stays; the original from
    before the killed run is kept beside the writes and named, and the writes are kept, not
    cleared. Twin: a file left as the killed run wrote it goes back (the test above)."""
    import time

    from torchboost.process.guard.guard_spec import WriteGuardSpec
    from torchboost.process.guard.run_guard import RunGuard
    from torchboost.process.guard.write_guard import WriteGuard

    project = tmp_path / "project"
    project.mkdir()
    (project / "ckpt.pt").write_bytes(b"step 100")
    (project / "notes.txt").write_text("v1")
    monkeypatch.chdir(project)
    first = RunGuard(project / "torchboost-doctor", project / "train.py")
    with WriteGuard(WriteGuardSpec.from_dict(first.spec())):
        (project / "ckpt.pt").write_bytes(b"the killed run's step 40")
        (project / "notes.txt").write_text("the killed run's notes")
    # torchboost is killed here; later the user trains again and saves:
    (project / "ckpt.pt").write_bytes(b"the user's step 200")
    later = time.time_ns() + 10 * 10**9
    os.utime(project / "ckpt.pt", ns=(later, later))
    second = RunGuard(project / "torchboost-doctor", project / "train.py")
    second.settle()
    assert (project / "ckpt.pt").read_bytes() == b"the user's step 200"
    assert (project / "notes.txt").read_text() == "v1"  # the twin: as the killed run left it, put back
    kept = list((project / "torchboost-doctor").rglob("originals/**/ckpt.pt"))
    assert len(kept) == 1 and kept[0].read_bytes() == b"step 100"
    assert "changed after the run torchboost was killed in" in second.note


def test_entries_no_process_was_seen_making_are_summed_apart_from_the_scripts_writes(tmp_path):
    """tune's summed line names the files the user made while it ran as made outside
    torchboost's sight, never as the script's; the twin, the script's own, is said written."""
    ledger = tmp_path / "writes.jsonl"
    run = {"writes_dir": "w", "restored": [], "note": None, "not_restored": [],
           "kept_apart": [{"path": "user_new_3.py", "times": 0, "moved_to": "x", "new": True, "entries": 1,
                           "seen": False},
                          {"path": "ckpt.pt", "times": 2, "moved_to": "y", "new": False, "entries": 1, "seen": True}]}
    ledger.write_text(json.dumps(run) + "\n")
    summed = summed_writes(ledger)
    assert summed["made"] == ["user_new_3.py"] and [p["path"] for p in summed["paths"]] == ["ckpt.pt"]
    assert "made outside torchboost's sight, left where it is: user_new_3.py" in summed["line"]
    assert "the script wrote ckpt.pt" in summed["line"] and "wrote user_new_3" not in summed["line"]
