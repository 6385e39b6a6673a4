"""The write guard in this process: what it journals, what it leaves alone, how it goes away.

The end-to-end runs (a script in its own process, then settling) are in test_user_files.py.
"""

from __future__ import annotations

import builtins
import io
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
import torch

from torchboost.process.guard.guard_spec import WriteGuardSpec, read_journal, scratch_folders
from torchboost.process.guard.write_guard import WriteGuard
from torchboost.process.guard.folder_snapshot import FolderSnapshot
from torchboost.process.guard.user_files import settle


@pytest.fixture
def folder(tmp_path):
    """The user's folder with an old checkpoint and a log, and the run's journal outside it."""
    user = tmp_path / "user"
    user.mkdir()
    torch.save({"step": 200}, user / "ckpt.pt")
    (user / "train.log").write_text("old\n")
    time.sleep(0.02)  # the user's files are older than the run, by more than the clock's tick
    return user


def _guard(folder: Path) -> WriteGuard:
    journal = folder.parent / "out" / "journal"
    spec = WriteGuardSpec(str(journal), time.time_ns(), roots=(str(folder),), exempt=(str(folder.parent / "out"),))
    time.sleep(0.02)
    return WriteGuard(spec)


def _ops(guard: WriteGuard) -> list[tuple[str, str]]:
    return [(line["op"], os.path.basename(line["path"])) for line in read_journal(guard.spec.journal_dir)]


def test_uninstall_restores_every_attribute_and_a_second_install_is_refused(folder):
    before = (builtins.open, io.open, os.open, os.replace, os.unlink, shutil.rmtree, torch.save,
              sys.dont_write_bytecode)
    guard = _guard(folder).install()
    try:
        assert builtins.open is io.open and builtins.open is not before[0]
        assert torch.save is torch.serialization.save is not before[6]
        assert shutil.rmtree.avoids_symlink_attacks == before[5].avoids_symlink_attacks
        with pytest.raises(RuntimeError, match="already installed"):
            _guard(folder).install()
    finally:
        guard.uninstall()
    guard.uninstall()  # twice is fine
    assert (builtins.open, io.open, os.open, os.replace, os.unlink, shutil.rmtree, torch.save,
            sys.dont_write_bytecode) == before


def test_read_only_opens_journal_nothing(folder):
    with _guard(folder) as guard:
        assert open(folder / "train.log").read() == "old\n"
        with open(folder / "ckpt.pt", "rb") as fh:
            fh.read(4)
        (folder / "train.log").read_text()
        os.close(os.open(folder / "train.log", os.O_RDONLY))
        torch.load(folder / "ckpt.pt")
    assert _ops(guard) == []


def test_twin_a_write_is_journaled(folder):
    with _guard(folder) as guard:
        open(folder / "train.log", "a").close()
    assert _ops(guard) == [("kept", "train.log"), ("wrote", "train.log")]


def test_the_script_reads_back_what_it_wrote(folder):
    with _guard(folder) as guard:
        for step in (10, 20):
            torch.save({"step": step}, folder / "ckpt.pt")
            assert torch.load(folder / "ckpt.pt")["step"] == step
        with open(folder / "train.log", "a") as fh:
            fh.write("new\n")
        assert (folder / "train.log").read_text() == "old\nnew\n"
    assert _ops(guard)[:3] == [("kept", "ckpt.pt"), ("wrote", "ckpt.pt"), ("wrote", "ckpt.pt")]


def test_safetensors_save_file_imported_by_the_script_is_guarded(folder):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    safetensors_torch.save_file({"w": torch.ones(2)}, str(folder / "model.safetensors"))
    with _guard(folder) as guard:
        from safetensors.torch import save_file  # the script's import, after the guard

        save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))
    assert ("kept", "model.safetensors") in _ops(guard)


@pytest.mark.slow
def test_a_forked_child_journals_in_a_file_of_its_own(folder):
    with _guard(folder) as guard:
        pid = os.fork()
        if pid == 0:  # a DataLoader worker writing a file
            try:
                torch.save({"step": 1}, folder / "ckpt.pt")
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        torch.save({"step": 2}, folder / "ckpt.pt")  # the child kept the original: not again
    kept = [line for line in read_journal(guard.spec.journal_dir) if line["op"] == "kept"]
    assert [(line["pid"], os.path.basename(line["path"])) for line in kept] == [(pid, "ckpt.pt")]


def test_exempt_folders_are_left_alone_but_a_root_inside_one_is_guarded(folder):
    out = folder.parent / "out"
    with _guard(folder) as guard:
        (out / "cache").mkdir(parents=True)
        (out / "cache" / "x").write_text("free")
        os.replace(out / "cache" / "x", out / "cache" / "y")
        open(os.devnull, "w").close()
    assert _ops(guard) == []
    spec = WriteGuardSpec(str(out / "j2"), time.time_ns(), roots=(str(folder),), exempt=(str(folder.parent),))
    time.sleep(0.02)
    with WriteGuard(spec) as inner:
        (folder / "train.log").write_text("x")
    assert ("kept", "train.log") in _ops(inner)


def test_a_guard_that_cannot_journal_never_stops_the_script(folder):
    blocked = folder.parent / "blocked"
    blocked.write_text("a file where the journal folder should be")
    spec = WriteGuardSpec(str(blocked / "journal"), time.time_ns(), roots=(str(folder),))
    time.sleep(0.02)
    with WriteGuard(spec):
        torch.save({"step": 1}, folder / "ckpt.pt")
        os.remove(folder / "train.log")
    assert torch.load(folder / "ckpt.pt")["step"] == 1 and not (folder / "train.log").exists()


def test_descriptor_relative_removals_are_kept(folder):
    before = (folder / "train.log").read_bytes()
    snapshot = FolderSnapshot.take([folder])
    spec = WriteGuardSpec(str(folder.parent / "out" / "journal"), snapshot.taken_ns, roots=snapshot.roots)
    time.sleep(0.02)
    with WriteGuard(spec):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.unlink("train.log", dir_fd=fd)
        finally:
            os.close(fd)
    writes = settle(snapshot, spec.journal_dir, folder.parent / "out" / "writes")
    assert (folder / "train.log").read_bytes() == before and writes.restored == ["train.log"]


def test_scratch_folders_name_the_temp_directory_and_caches(tmp_path):
    found = scratch_folders(home=tmp_path / "home", temp_dir=tmp_path / "tmp",
                            environ={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    assert [Path(p).name for p in found] == ["tmp", ".cache", ".triton", "inductor"]
    spec = WriteGuardSpec("/j", 1, roots=("/a",), scratch=found, own_folder="/o", own_names=("facts*.json",))
    assert WriteGuardSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(ValueError, match="journal_dir"):
        WriteGuardSpec("relative", 1)


def test_scratch_keeps_what_was_there_and_leaves_what_the_run_makes(folder):
    """The temp directory and the caches: a file there from before the run is kept (and put
    back) like the user's; what the run makes there is its own. Twin: the same place as
    exempt, as it was, keeps nothing."""
    scratch = folder.parent / "scratch"
    scratch.mkdir()
    torch.save({"step": 200}, scratch / "ckpt.pt")
    time.sleep(0.02)
    for kind in ("scratch", "exempt"):
        spec = WriteGuardSpec(str(folder.parent / f"j-{kind}"), time.time_ns(), roots=(str(folder),),
                              **{kind: (str(scratch),)})
        time.sleep(0.02)
        with WriteGuard(spec) as guard:
            torch.save({"step": 1}, scratch / "ckpt.pt")
            (scratch / f"new-{kind}.txt").write_text("the run's own")
        ops = _ops(guard)
        if kind == "scratch":
            assert ops == [("kept", "ckpt.pt"), ("wrote", "ckpt.pt")]  # no "created" for the new file
            kept = next(line["copy"] for line in read_journal(spec.journal_dir) if line["op"] == "kept")
            assert torch.load(kept)["step"] == 200
        else:
            assert ops == []


def test_the_report_folder_is_guarded_but_for_torchboosts_own_entries(folder):
    out = folder / "results"
    out.mkdir()
    (out / "metrics.csv").write_text("the user's\n")
    (out / "facts.json").write_text("{}")
    time.sleep(0.02)
    spec = WriteGuardSpec(str(folder.parent / "j"), time.time_ns(), roots=(str(folder),), own_folder=str(out),
                          own_names=("facts*.json", "writes"))
    time.sleep(0.02)
    with WriteGuard(spec) as guard:
        (out / "facts.json").write_text('{"steps": 3}')
        (out / "facts.rank1.json").write_text("{}")
        with open(out / "metrics.csv", "a") as fh:
            fh.write("the script's\n")
    assert _ops(guard) == [("kept", "metrics.csv"), ("wrote", "metrics.csv")]


def test_a_database_only_read_is_not_said_written(folder):
    import sqlite3

    with sqlite3.connect(folder / "tracker.db") as db:
        db.execute("create table m (x int)")
    db.close()
    time.sleep(0.02)
    snapshot = FolderSnapshot.take([folder])
    spec = WriteGuardSpec(str(folder.parent / "out" / "journal"), snapshot.taken_ns, roots=snapshot.roots)
    time.sleep(0.02)
    with WriteGuard(spec) as guard:
        db = sqlite3.connect(folder / "tracker.db")
        assert db.execute("select count(*) from m").fetchone() == (0,)
        db.close()
    assert ("kept", "tracker.db") in _ops(guard)  # kept before the connection, in case it wrote
    writes = settle(snapshot, spec.journal_dir, folder.parent / "out" / "writes")
    assert writes.kept_apart == [] and writes.words() == "the script wrote nothing in your folders"


def _keeps(folder: Path, write) -> bool:
    """Whether the guard kept ``folder/target``'s original before ``write(path)`` changed it."""
    target = folder / "target"
    target.write_bytes(b"the user's")
    time.sleep(0.02)
    with _guard(folder) as guard:
        write(target)
    kept = [line for line in read_journal(guard.spec.journal_dir) if line["op"] == "kept"]
    shutil.rmtree(guard.spec.journal_dir, ignore_errors=True)
    return [os.path.basename(line["path"]) for line in kept] == ["target"]


@pytest.mark.parametrize("how", ["tarfile", "bz2", "FileIO", "jit", "chmod_then_write"])
def test_writers_past_builtins_open_are_kept(folder, how):
    import bz2
    import tarfile

    def write(path: Path) -> None:
        if how == "tarfile":
            with tarfile.open(path, "w"):
                pass
        elif how == "bz2":
            with bz2.open(path, "wb") as fh:
                fh.write(b"x")
        elif how == "FileIO":
            with io.FileIO(str(path), "w") as fh:
                fh.write(b"x")
        elif how == "jit":
            torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), str(path))
        else:
            os.chmod(path, 0o600)
            with open(path, "w") as fh:
                fh.write("x")

    assert _keeps(folder, write)


def test_twin_without_the_aliases_of_open_a_tar_archive_goes_unseen(folder, monkeypatch):
    import tarfile

    from torchboost.process.guard import writers

    monkeypatch.setattr(writers, "open_aliases", lambda original, wrapper: [])
    assert not _keeps(folder, lambda path: tarfile.open(path, "w").close())


def test_a_shared_memory_map_of_a_users_file_keeps_it_first_and_a_private_one_does_not(folder):
    """``torch.from_file(path, shared=True)``: the tensor's writes reach the file through the
    map, past every call: the original is kept before. The twin, a private map (shared=False),
    only reads the file and keeps nothing."""
    (folder / "mapped.bin").write_bytes(bytes(64))
    time.sleep(0.02)
    for shared, kept in ((True, [("kept", "mapped.bin")]), (False, [])):
        with _guard(folder) as guard:
            tensor = torch.from_file(str(folder / "mapped.bin"), shared=shared, size=16, dtype=torch.float32)
            tensor.fill_(1.0)
            del tensor
        assert [op for op in _ops(guard) if op[0] == "kept"] == kept
        shutil.rmtree(guard.spec.journal_dir, ignore_errors=True)
