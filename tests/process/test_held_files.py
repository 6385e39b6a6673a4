"""Files held open for writing by the run's processes: seen, and named when they changed past the guard."""

from __future__ import annotations

import os
import time

import psutil

from torchboost.process.guard.guard_spec import EXEMPT, SCRATCH, USERS, written_files
from torchboost.process.guard.held_files import HeldFile, HeldFiles, journal_held, out_of_sight


def test_the_sampler_sees_a_file_open_for_writing_and_not_one_open_for_reading(tmp_path):
    written, read = tmp_path / "tracker.db", tmp_path / "data.bin"
    read.write_bytes(b"x")
    held = HeldFiles(tree=lambda: [psutil.Process()])
    with open(written, "ab"), open(read, "rb"):
        held.sample()
        assert (str(written.resolve()), written.stat().st_ino) in written_files()
    mine = {path for path in held.found if path.startswith(str(tmp_path.resolve()))}  # the test process's own
    assert mine == {str(written.resolve())}
    assert held.found[str(written.resolve())].ctime_ns == written.stat().st_ctime_ns


def _file(path, *, old: bool) -> HeldFile:
    path.write_text("x")
    st = path.stat()
    return HeldFile(str(path), st.st_ino, st.st_ctime_ns - (10**12 if old else 0))


def test_only_changed_files_nothing_put_back_are_named(tmp_path):
    started = time.time_ns() - 10**9  # every file below was changed after the run started
    held = {str(p): _file(p, old=True) for p in (tmp_path / "a.db", tmp_path / "b.db", tmp_path / "own.json")}
    unchanged = tmp_path / "c.db"
    held[str(unchanged)] = _file(unchanged, old=True)
    os.utime(unchanged, ns=(started - 10**9, started - 10**9))
    kinds = {str(tmp_path / "own.json"): EXEMPT}
    named = out_of_sight(held, started_ns=started, kind=lambda p: kinds.get(p, USERS),
                         settled=lambda p: p.endswith("b.db"))
    assert named == [str(tmp_path / "a.db")]


def test_in_scratch_only_a_file_seen_older_than_the_run_is_named(tmp_path):
    started = time.time_ns() - 10**9
    held = {str(tmp_path / "old.db"): _file(tmp_path / "old.db", old=True),
            str(tmp_path / "new.db"): _file(tmp_path / "new.db", old=False)}
    held.update(journal_held([{"op": "held", "path": str(tmp_path / "unknown.db"), "inode": 1}]))
    (tmp_path / "unknown.db").write_text("x")
    named = out_of_sight(held, started_ns=started, kind=lambda p: SCRATCH, settled=lambda p: False)
    assert named == [str(tmp_path / "old.db")]  # the twin: the same file in the user's places, named whatever its age
    assert out_of_sight(held, started_ns=started, kind=lambda p: USERS, settled=lambda p: False) == sorted(held)
