"""tune's torchboost.toml: left alone when nothing changed, the user's own file kept in .bak."""

from __future__ import annotations

import os

from torchboost.config import BoostConfig
from torchboost.tune import config_file
from torchboost.tune.config_file import (HEADER_START, TunedFor, backup_path, tuned_for, write_config,
                                         written_by_torchboost)

USER_FILE = "# my settings, by hand\n[cpu]\nthreads = 2  # two is enough here\n"
HEADER = f"{HEADER_START} python train.py\nkept something"


def _user_file(tmp_path):
    path = tmp_path / "torchboost.toml"
    path.write_text(USER_FILE)
    os.utime(path, ns=(1, 1))  # an old mtime: a rewrite would show
    return path, BoostConfig.from_toml(path)


def test_nothing_changed_leaves_the_file_byte_for_byte(tmp_path):
    path, mine = _user_file(tmp_path)
    done = write_config(path, mine, HEADER)
    assert not done.changed and done.backup is None
    assert path.read_text() == USER_FILE and path.stat().st_mtime_ns == 1  # comments kept, not rewritten
    assert not backup_path(path).exists()


def test_the_twin_a_change_is_written_and_the_users_file_kept(tmp_path):
    path, mine = _user_file(tmp_path)
    tuned = BoostConfig.from_dict({**mine.to_dict(), "cpu": {"threads": 1}})
    done = write_config(path, tuned, HEADER)
    assert done.changed and done.backup == backup_path(path)
    assert BoostConfig.from_toml(path) == tuned and written_by_torchboost(path)
    assert backup_path(path).read_text() == USER_FILE


def _two_tunes(tmp_path) -> str:
    """The user's file, then two tunes that each change it; what the .bak holds at the end."""
    path, mine = _user_file(tmp_path)
    for threads in (1, 3):
        write_config(path, BoostConfig.from_dict({**mine.to_dict(), "cpu": {"threads": threads}}), HEADER)
    return backup_path(path).read_text()


def test_two_tunes_keep_the_users_own_file_in_bak(tmp_path):
    assert _two_tunes(tmp_path) == USER_FILE
    assert not written_by_torchboost(backup_path(tmp_path / "torchboost.toml"))


def test_the_broken_twin_backing_up_every_time_loses_the_users_file(tmp_path, monkeypatch):
    # The old rule: every existing file was copied to .bak, torchboost's own output too.
    monkeypatch.setattr(config_file, "written_by_torchboost", lambda path: False)
    kept = _two_tunes(tmp_path)
    assert kept != USER_FILE and kept.startswith(f"# {HEADER_START}")


def test_a_user_file_written_after_a_tune_replaces_the_bak(tmp_path):
    path, mine = _user_file(tmp_path)
    write_config(path, BoostConfig.from_dict({**mine.to_dict(), "cpu": {"threads": 1}}), HEADER)
    path.write_text("# edited again by hand\n[cpu]\nthreads = 4\n")  # the user's newer file
    write_config(path, BoostConfig.from_dict({**mine.to_dict(), "cpu": {"threads": 3}}), HEADER)
    assert backup_path(path).read_text() == "# edited again by hand\n[cpu]\nthreads = 4\n"


# -- what the file was tuned for ---------------------------------------------------------

def _script(tmp_path, text="print('v1')\n"):
    script = tmp_path / "train.py"
    script.write_text(text)
    return script


def test_the_header_records_the_command_and_the_scripts_hash(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _script(tmp_path)
    record = TunedFor.of(["python", "train.py", "--lr", "1e-3 x"])
    path = tmp_path / "torchboost.toml"
    write_config(path, BoostConfig.off(), "\n".join([*record.lines(), "kept nothing"]))
    assert tuned_for(path) == record and record.script == "train.py" and len(record.script_sha256) == 16
    assert BoostConfig.from_toml(path) == BoostConfig.off()  # the record is comments: the tables stay settings


def test_an_edited_script_differs_by_its_hash(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = _script(tmp_path)
    then = TunedFor.of(["python", "train.py"])
    assert then.differences(TunedFor.of(["python3", "train.py"])) == []  # the twin: the same script
    script.write_text("print('v2')\n")
    differs = then.differences(TunedFor.of(["python", "train.py"]))
    assert len(differs) == 1 and differs[0].startswith(f"sha256 {then.script_sha256[:8]}… then")
    assert TunedFor.of(["python", "train.py", "--bs", "64"]).differences(TunedFor.of(["python", "train.py"]))[-1] \
        == "command then: python train.py --bs 64"


def test_a_module_is_hashed_without_being_imported(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("raise SystemExit('imported')\n")
    (tmp_path / "pkg" / "train.py").write_text("print('train')\n")
    record = TunedFor.of(["python", "-m", "pkg.train"])
    assert record.script == os.path.join("pkg", "train.py") and record.script_sha256


def test_a_file_without_a_record_has_none(tmp_path):
    path, _ = _user_file(tmp_path)
    assert tuned_for(path) is None
    path.write_text(f"# {HEADER_START} python train.py\n[cpu]\nthreads = 1\n")  # an older torchboost's
    assert tuned_for(path) == TunedFor(("python", "train.py"))


def test_the_same_settings_tuned_for_another_script_are_rewritten(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = _script(tmp_path)
    path = tmp_path / "torchboost.toml"
    write_config(path, BoostConfig.off(), "\n".join(TunedFor.of(["python", "train.py"]).lines()))
    same = write_config(path, BoostConfig.off(), "\n".join(TunedFor.of(["python", "train.py"]).lines()))
    assert not same.changed  # the twin: the same record, the file left alone
    script.write_text("print('v2')\n")
    now = TunedFor.of(["python", "train.py"])
    assert write_config(path, BoostConfig.off(), "\n".join(now.lines())).changed and tuned_for(path) == now
