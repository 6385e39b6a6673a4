"""The user's folder left as it was: a real script run with the write guard, then settled.

Each script runs in its own Python process in a folder holding the user's files, the
guard installed before it starts (as the observed child does); afterwards every file's
hash and time must be as before, no new entry left, and the writes listed. Each has a
twin run without the guard, where the same check must fail.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import torchboost
from torchboost.process.guard.guard_spec import WriteGuardSpec
from torchboost.process.guard.folder_snapshot import FolderSnapshot
from torchboost.process.guard.user_files import UserWrites, settle

SRC = str(Path(torchboost.__file__).parent.parent)
OUT = "torchboost-doctor"

_BOOT = textwrap.dedent("""
    import json, runpy, sys
    if sys.argv[1] != "-":
        from torchboost.process.guard.guard_spec import WriteGuardSpec
        from torchboost.process.guard.write_guard import WriteGuard
        WriteGuard(WriteGuardSpec.from_dict(json.loads(sys.argv[1]))).install()
    sys.argv = [sys.argv[2]]
    runpy.run_path(sys.argv[0], run_name="__main__")
""")


def _project(tmp_path: Path, script: str) -> Path:
    """The user's folder: a real checkpoint (step 200), logs, data, a config, the script."""
    project = tmp_path / "project"
    (project / "runs" / "old").mkdir(parents=True)
    (project / "train.py").write_text(textwrap.dedent(script))
    (project / "data").mkdir()
    torch.save({"step": 200}, project / "ckpt.pt")
    (project / "runs" / "metrics.csv").write_text("step,loss\n200,0.5\n")
    (project / "runs" / "old" / "events.txt").write_text("the user's run\n")
    (project / "data" / "train.bin").write_bytes(b"\x01" * 64)
    (project / "config.json").write_text('{"lr": 0.1}')
    (project / "old.log").write_text("old\n")
    (project / "notes.txt").write_text("notes\n")
    (project / OUT).mkdir()  # the --out folder, inside the user's folder as usual
    for path in project.rglob("*"):  # the user's files are old, as they would be
        os.utime(path, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    os.utime(project, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    return project


def _state(project: Path) -> dict[str, tuple]:
    """Every entry outside the --out folder: a file's sha256 and mtime, a folder's mtime."""
    out = {".": ("dir", project.stat().st_mtime_ns)}
    for path in sorted(project.rglob("*")):
        rel = str(path.relative_to(project))
        if rel == OUT or rel.startswith(OUT + os.sep):
            continue
        if path.is_dir():
            out[rel] = ("dir", path.stat().st_mtime_ns)
        else:
            out[rel] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    return out


def _run(project: Path, *, guard: bool, trial: str = "writes") -> UserWrites:
    """Snapshot, run train.py in ``project`` (guarded or not), settle."""
    out = project / OUT
    snapshot = FolderSnapshot.take([project], exempt=[out])
    journal = out / f"journal-{trial}"
    spec = WriteGuardSpec(str(journal), snapshot.taken_ns, roots=snapshot.roots, exempt=(str(out),))
    env = {**os.environ, "PYTHONPATH": SRC}
    argv = [sys.executable, "-c", _BOOT, json.dumps(spec.to_dict()) if guard else "-", "train.py"]
    done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return settle(snapshot, journal, out / trial)


def _run_patched(project: Path, patch: str) -> UserWrites:
    """:func:`_run` guarded, ``patch`` (lines of Python) run in the script's process before its
    guard installs: a twin's guard with one of its parts taken out."""
    global _BOOT
    saved = _BOOT
    if patch:
        _BOOT = _BOOT.replace("WriteGuard(WriteGuardSpec", f"{patch}\n    WriteGuard(WriteGuardSpec")
    try:
        return _run(project, guard=True)
    finally:
        _BOOT = saved


CHECKPOINTING = """
    import torch
    for step in range(10, 40, 10):
        torch.save({"step": step}, "ckpt.pt")
        assert torch.load("ckpt.pt")["step"] == step  # the script reads back what it wrote
"""


@pytest.mark.slow
def test_a_checkpointing_script_leaves_the_users_checkpoint(tmp_path):
    project = _project(tmp_path, CHECKPOINTING)
    before = _state(project)
    writes = _run(project, guard=True)
    assert _state(project) == before
    assert torch.load(project / "ckpt.pt")["step"] == 200
    assert [(w.path, w.times, w.new) for w in writes.kept_apart] == [("ckpt.pt", 3, False)]
    assert torch.load(writes.kept_apart[0].moved_to)["step"] == 30  # the script's last checkpoint, kept apart
    assert writes.restored == ["ckpt.pt"] and writes.not_restored == []
    assert writes.words() == (f"the script wrote ckpt.pt 3 times: kept apart in {OUT}/writes/; "
                              "your folders are as they were, and so is every file the run's Python changed elsewhere")


@pytest.mark.slow
def test_twin_without_the_guard_the_checkpoint_is_lost_and_said(tmp_path):
    project = _project(tmp_path, CHECKPOINTING)
    before = _state(project)
    writes = _run(project, guard=False)
    assert _state(project) != before  # the check can fail
    assert torch.load(project / "ckpt.pt")["step"] == 30
    assert [n.path for n in writes.not_restored] == ["ckpt.pt"]
    assert "changed outside torchboost's sight: ckpt.pt" in writes.words()


LOGGING = """
    import logging, os, pathlib, shutil, tempfile, time
    run = os.path.join("runs", time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(run)
    log = logging.getLogger("train")
    log.addHandler(logging.FileHandler(os.path.join(run, "train.log")))
    for step in range(3):
        with open("runs/metrics.csv", "a") as f:
            f.write(f"{step},1.0\\n")
        log.warning("step %d", step)
    pathlib.Path(run, "summary.txt").write_text("done")
    os.makedirs("runs/empty/inner")
    fd, tmp = tempfile.mkstemp(dir=".")
    os.write(fd, b'{"lr": 0.2}'); os.close(fd)
    os.replace(tmp, "config.json")
    os.remove("old.log")
    shutil.rmtree("data")
    shutil.rmtree("runs/old")
    pathlib.Path("notes.txt").touch()
    shutil.copy("notes.txt", "copy.txt")
    shutil.move("copy.txt", "moved.txt")
    pathlib.Path("moved.txt").rename("renamed.txt")
    assert open("runs/metrics.csv").read().count("\\n") == 5  # reads back its own appends
"""


@pytest.mark.slow
def test_a_logging_script_leaves_the_folder_as_it_was(tmp_path):
    project = _project(tmp_path, LOGGING)
    before = _state(project)
    writes = _run(project, guard=True)
    assert _state(project) == before
    shown = {w.path: w for w in writes.kept_apart}
    assert shown["runs/metrics.csv"].times == 3 and not shown["runs/metrics.csv"].new
    run = next(p for p in shown if p.startswith("runs/2"))
    assert shown[run].entries == 3 and Path(shown[run].moved_to, "summary.txt").read_text() == "done"
    assert shown["runs/empty"].moved_to is None  # an empty folder the run made: removed
    assert shown["renamed.txt"].new and shown["config.json"].times == 1
    restored = {"config.json", "old.log", "data", "data/train.bin", "runs/old/events.txt", "notes.txt"}
    assert restored <= set(writes.restored)
    assert writes.not_restored == []
    assert writes.words().endswith("your folders are as they were, and so is every file the run's Python changed elsewhere")


@pytest.mark.slow
def test_twin_without_the_guard_the_logging_script_leaves_its_marks(tmp_path):
    project = _project(tmp_path, LOGGING)
    before = _state(project)
    writes = _run(project, guard=False)
    after = _state(project)
    assert after != before
    assert {"config.json", "old.log", "data/train.bin", "runs/metrics.csv"} <= {n.path for n in writes.not_restored}


@pytest.mark.slow
def test_a_writer_outside_python_is_reported_not_restored(tmp_path):
    project = _project(tmp_path, """
        import subprocess, torch
        torch.save({"step": 1}, "ckpt.pt")
        subprocess.run(["sh", "-c", "echo x >> old.log"], check=True)
    """)
    writes = _run(project, guard=True)
    assert [(n.path, n.why) for n in writes.not_restored] == [
        ("old.log", "changed outside torchboost's sight")]
    assert torch.load(project / "ckpt.pt")["step"] == 200  # what Python wrote is still put back
    assert "changed outside torchboost's sight: old.log" in writes.words()


@pytest.mark.slow
def test_settling_twice_per_trial(tmp_path):
    project = _project(tmp_path, CHECKPOINTING)
    before = _state(project)
    first = _run(project, guard=True, trial="trial-1")
    second = _run(project, guard=True, trial="trial-2")
    assert _state(project) == before
    assert [w.moved_to for w in first.kept_apart] == [str(project / OUT / "trial-1" / "ckpt.pt")]
    assert [w.moved_to for w in second.kept_apart] == [str(project / OUT / "trial-2" / "ckpt.pt")]


@pytest.mark.slow
def test_writes_outside_the_users_folder_are_put_back_too(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "shared.txt").write_text("shared")
    os.utime(elsewhere / "shared.txt", ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    project = _project(tmp_path, f"""
        open({str(elsewhere / 'shared.txt')!r}, "w").write("overwritten")
        open({str(elsewhere / 'new.txt')!r}, "w").write("new")
        open("{OUT}/free.txt", "w").write("the out folder is the run's own")
    """)
    writes = _run(project, guard=True)
    assert (elsewhere / "shared.txt").read_text() == "shared" and not (elsewhere / "new.txt").exists()
    assert (project / OUT / "free.txt").exists()
    moved = {w.path: w.moved_to for w in writes.kept_apart}
    assert Path(moved[str(elsewhere / "new.txt")]).read_text() == "new"


def test_a_folder_too_large_is_said_before_the_run(tmp_path):
    project = _project(tmp_path, CHECKPOINTING)
    snapshot = FolderSnapshot.take([project], exempt=[project / OUT], max_entries=3)
    assert not snapshot.complete and "more than 3 entries" in snapshot.note
    full = FolderSnapshot.take([project, project / "runs"], exempt=[project / OUT])
    assert full.complete and full.roots == (str(project.resolve()),)
    assert str(project.resolve() / OUT) not in full.entries and str(project.resolve() / "runs" / "old") in full.entries


@pytest.mark.parametrize("n", [1, 5])
def test_words_name_what_was_written(n):
    from torchboost.process.guard.user_files import NotRestored, WrittenPath

    kept = [WrittenPath(f"f{i}.pt", 2, "w", False) for i in range(n)]
    writes = UserWrites("out/writes", kept, [], [NotRestored("x.log", "changed")])
    assert writes.words().startswith("the script wrote f0.pt 2 times")
    assert writes.words().endswith("NOT restored: x.log (changed)")
    assert ("and 2 more" in writes.words()) == (n == 5)
    assert json.loads(json.dumps(writes.to_dict()))["writes_dir"] == "out/writes"


METADATA_FIRST = """
    import os, pathlib, torch
    pathlib.Path("notes.txt").touch()  # its ctime moves: by that alone the write below looked the run's
    open("notes.txt", "w").write("the run's status\\n")
    os.chmod("config.json", 0o600)
    open("config.json", "w").write("{}")
    os.utime("old.log")  # touched only: its times go back
    os.link("data/train.bin", "data/linked.bin")
    with open("data/train.bin", "r+b") as fh:
        fh.write(b"\\x02")
"""


@pytest.mark.slow
def test_a_file_touched_or_chmodded_before_a_write_is_still_kept(tmp_path):
    project = _project(tmp_path, METADATA_FIRST)
    os.chmod(project / "config.json", 0o644)
    before = {**_state(project), "mode": (project / "config.json").stat().st_mode}
    writes = _run(project, guard=True)
    assert {**_state(project), "mode": (project / "config.json").stat().st_mode} == before
    assert {"notes.txt", "config.json", "old.log"} <= set(writes.restored) and writes.not_restored == []


@pytest.mark.slow
def test_twin_a_guard_that_takes_a_touched_file_for_the_runs_loses_it(tmp_path, monkeypatch):
    """The same script with the guard's memory of touched files taken away (as it was): the
    user's notes are gone, and said to be restored; the check above can fail."""
    project = _project(tmp_path, METADATA_FIRST)
    before = (project / "notes.txt").read_bytes()
    boot = _BOOT.replace("WriteGuard(WriteGuardSpec", "from torchboost.process.guard import guard_keeper\n"
                         "    guard_keeper.Keeper._users = lambda self, p, st: p not in self._kept and p not in "
                         "self._created and st.st_ctime_ns < self._started_ns\n    WriteGuard(WriteGuardSpec")
    monkeypatch.setattr(sys.modules[__name__], "_BOOT", boot)
    _run(project, guard=True)
    assert (project / "notes.txt").read_bytes() != before


@pytest.mark.slow
def test_a_hard_linked_file_changed_in_place_is_put_back_under_every_name(tmp_path):
    """``data/train.bin`` is a hard link of a store outside the folder: appended to and
    rewritten in place, its original goes back into the same inode, so the store's name
    sees it too. Twin: restored by replacing the inode (as it was), the store keeps the
    script's version."""
    from torchboost.process.guard import user_files

    for twin in (False, True):
        project = _project(tmp_path / str(twin), """
            with open("data/train.bin", "ab") as fh:
                fh.write(b"appended")
        """)
        store = tmp_path / str(twin) / "store.bin"
        os.link(project / "data" / "train.bin", store)
        before = store.read_bytes()
        if twin:
            shared = user_files._changed_in_place
            user_files._changed_in_place = lambda path, line: False
        try:
            _run(project, guard=True)
        finally:
            if twin:
                user_files._changed_in_place = shared
        assert (project / "data" / "train.bin").read_bytes() == before
        assert (store.read_bytes() == before) is not twin
        assert os.path.samefile(store, project / "data" / "train.bin") is not twin


@pytest.mark.slow
def test_a_name_that_is_not_utf8_is_shown_printable_and_kept_apart_as_named(tmp_path):
    """The script makes a file whose name is Latin-1 bytes (``caf`` and 0xe9): kept apart under
    its own bytes, shown with a backslash escape, which a UTF-8 report can hold. Twin: the
    raw name cannot be encoded."""
    project = _project(tmp_path, """
        open(b"caf\\xe9.txt", "w").write("x")
    """)
    writes = _run(project, guard=True)
    assert [w.path for w in writes.kept_apart] == ["caf\\xe9.txt"]
    assert os.path.exists(os.fsencode(writes.kept_apart[0].moved_to)) and not (project / os.fsdecode(b"caf\xe9.txt")).exists()
    (writes.words() + json.dumps(writes.to_dict(), ensure_ascii=False)).encode("utf-8")
    with pytest.raises(UnicodeEncodeError):
        os.fsdecode(b"caf\xe9.txt").encode("utf-8")


@pytest.mark.slow
def test_a_users_file_renamed_onto_another_puts_both_back(tmp_path):
    """``os.replace("config.json", "notes.txt")``: both are the user's. Each goes back with its
    own bytes: the rename's source is not written over by the destination's restore (both
    names held one inode a moment). Twin: the old in-place rule (any name with another link)
    writes the destination's bytes into the source."""
    from torchboost.process.guard import user_files

    for twin in (False, True):
        project = _project(tmp_path / str(twin), """
            import os
            os.replace("config.json", "notes.txt")
        """)
        before = {name: (project / name).read_bytes() for name in ("config.json", "notes.txt")}
        if twin:
            changed = user_files._changed_in_place
            user_files._changed_in_place = lambda path, line: os.path.lexists(path) and os.lstat(path).st_nlink > 1
        try:
            _run(project, guard=True)
        finally:
            if twin:
                user_files._changed_in_place = changed
        after = {name: (project / name).read_bytes() for name in ("config.json", "notes.txt")}
        assert (after == before) is not twin


@pytest.mark.slow
def test_a_write_through_a_new_hard_link_leaves_the_users_file_as_it_was(tmp_path):
    """``os.link("ckpt.pt", "best.pt")`` then ``torch.save(..., "best.pt")``: torch.save
    rewrites the inode both names share. The user's checkpoint is back; best.pt, the run's,
    is moved out. Twin: without the original kept at the link, the checkpoint is lost."""
    for twin in (False, True):
        project = _project(tmp_path / str(twin), """
            import os, torch
            os.link("ckpt.pt", "best.pt")
            with open("best.pt", "r+b") as fh:  # in place, through the new name
                fh.write(b"the run's bytes")
        """)
        before = (project / "ckpt.pt").read_bytes()
        # The twin: the guard in the script's process keeps nothing at the link.
        _run_patched(project, "WriteGuard._keep_linked = lambda *a: None" if twin else "")
        assert ((project / "ckpt.pt").read_bytes() == before) is not twin
        assert not (project / "best.pt").exists()


@pytest.mark.slow
def test_a_file_another_process_touched_before_the_script_wrote_it_is_still_kept(tmp_path):
    """A ``touch`` in a subprocess moves the file's ctime to now, by which the guard took it
    for the run's: it keeps the original by the file's birth time. Twin: with no birth time
    (a filesystem that keeps none), the ctime rule keeps nothing, and the notes are lost."""
    for twin in (False, True):
        project = _project(tmp_path / str(twin), """
            import subprocess
            subprocess.run(["touch", "notes.txt"], check=True)
            open("notes.txt", "w").write("the run's")
        """)
        before = (project / "notes.txt").read_bytes()
        _run_patched(project, "from torchboost.process.guard import guard_keeper\n"
                              "    guard_keeper.birth_ns = lambda path: None" if twin else "")
        assert ((project / "notes.txt").read_bytes() == before) is not twin
