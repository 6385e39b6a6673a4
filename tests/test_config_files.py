"""Where the configuration lives: torchboost.toml or [tool.torchboost] in pyproject.toml, one
of them; tune's result written into pyproject.toml leaves every other line as it was."""

from __future__ import annotations

import pytest

from torchboost.booster import load_config
from torchboost.config import BoostConfig, ConfigError
from torchboost.config_files import ConfigFile, config_text, config_to_write, find_config, tool_toml, with_tool_table
from torchboost.tune.config_file import TunedFor, tuned_for, user_config, write_config

PROJECT = '''[project]
name = "mine"

# my formatter
[tool.black]
line-length = 100

[tool.torchboost.cpu]
threads = 1

[tool.ruff]
line-length = 100
'''


def test_neither_file_is_no_configuration(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "mine"\n')  # no [tool.torchboost]
    assert find_config(tmp_path) is None
    assert config_to_write(tmp_path) == tmp_path / "torchboost.toml"


def test_the_pyproject_table_is_read_as_torchboost_toml_is(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(PROJECT)
    assert find_config(tmp_path) == config_to_write(tmp_path) == tmp_path / "pyproject.toml"
    assert BoostConfig.from_toml(tmp_path / "pyproject.toml") == BoostConfig().replace(cpu={"threads": 1})
    read = ConfigFile.read(tmp_path / "pyproject.toml")
    assert (read.config, read.written, read.header) == (BoostConfig().replace(cpu={"threads": 1}), {"cpu.threads"}, ())
    monkeypatch.chdir(tmp_path)
    assert load_config(None).cpu.threads == 1  # what Booster() reads


def test_a_bad_key_in_the_table_names_the_file_and_the_table(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.torchboost.cpu]\nthread = 1\n')
    with pytest.raises(ConfigError, match=r"pyproject.toml \[tool.torchboost\]: unknown key \"cpu.thread\""):
        BoostConfig.from_toml(tmp_path / "pyproject.toml")


def test_both_is_an_error_naming_both(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(PROJECT)
    (tmp_path / "torchboost.toml").write_text("[cpu]\nthreads = 2\n")
    with pytest.raises(ConfigError, match=r"both .*torchboost.toml and .*pyproject.toml \[tool.torchboost\]"):
        find_config(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="both"):
        load_config(None)


def test_twin_a_pyproject_without_the_table_beside_torchboost_toml_is_no_conflict(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PROJECT.replace("[tool.torchboost.cpu]\nthreads = 1\n", ""))
    (tmp_path / "torchboost.toml").write_text("[cpu]\nthreads = 2\n")
    assert find_config(tmp_path) == tmp_path / "torchboost.toml"


def test_tune_writes_the_table_and_leaves_every_other_line(tmp_path):
    path = tmp_path / "pyproject.toml"
    path.write_text(PROJECT)
    assert user_config(path) == BoostConfig().replace(cpu={"threads": 1})  # the search starts from it
    tuned = BoostConfig.off().replace(cpu={"threads": 1}, precision={"mode": "bf16"})
    done = write_config(path, tuned, "Tuned by torchboost for: python train.py")
    assert done.changed and done.backup == tmp_path / "pyproject.toml.bak"
    assert (tmp_path / "pyproject.toml.bak").read_text() == PROJECT
    text = path.read_text()
    others = [line for line in PROJECT.splitlines() if line and "torchboost" not in line and "threads" not in line]
    assert [line for line in text.splitlines() if line in others] == others  # in their order
    assert text.index("[tool.black]") < text.index("# Tuned by torchboost") < text.index("[tool.ruff]")
    assert BoostConfig.from_toml(path) == tuned
    assert tuned_for(path) == TunedFor(("python", "train.py"))
    assert config_text(path).startswith("# Tuned by torchboost for: python train.py\n[tool.torchboost.")
    assert "[tool.black]" not in config_text(path)
    again = write_config(path, tuned, "Tuned by torchboost for: python train.py")
    assert not again.changed  # the same configuration: the file is left as it is


def test_a_second_tune_replaces_its_own_header_and_keeps_the_users_comment(tmp_path):
    path = tmp_path / "pyproject.toml"
    path.write_text(PROJECT.replace("[tool.torchboost.cpu]", "# mine, by hand\n[tool.torchboost.cpu]"))
    write_config(path, BoostConfig.off(), "Tuned by torchboost for: python a.py")
    write_config(path, BoostConfig.off().replace(cpu={"threads": 2}), "Tuned by torchboost for: python b.py")
    text = path.read_text()
    assert text.count("# Tuned by torchboost") == 1 and "python b.py" in text
    assert text.count("# mine, by hand") == 1


def test_a_table_written_inline_is_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "pyproject.toml"
    inline = '[tool]\ntorchboost = { cpu = { threads = 1 } }\n'
    path.write_text(inline)
    with pytest.raises(ConfigError, match="cannot rewrite"):
        write_config(path, BoostConfig.off(), "Tuned by torchboost for: python a.py")
    assert path.read_text() == inline and not (tmp_path / "pyproject.toml.bak").exists()


def test_the_table_goes_at_the_end_of_a_pyproject_without_one():
    text = with_tool_table('[project]\nname = "mine"\n', tool_toml(BoostConfig.off(), "Tuned by torchboost for: x"))
    assert text.startswith('[project]\nname = "mine"\n\n# Tuned by torchboost for: x\n[tool.torchboost.')
