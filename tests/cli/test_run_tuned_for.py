"""`torchboost run` on a script edited since tune: one line says so, and the script still runs."""

from __future__ import annotations

import sys

import pytest

from torchboost import cli
from torchboost.config import BoostConfig
from torchboost.tune.config_file import TunedFor, write_config

WORD = "was tuned for another"


@pytest.fixture
def tuned(tmp_path, monkeypatch):
    """A train.py, and a torchboost.toml tune wrote for it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script runs here: run sets sys.path[0]
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    script = tmp_path / "train.py"
    script.write_text("open('ran', 'w').close()\n")
    header = "\n".join([*TunedFor.of(["python", "train.py"]).lines(), "kept cpu.threads=1"])
    write_config(tmp_path / "torchboost.toml", BoostConfig.off().replace(cpu={"threads": 1}), header)
    return script


def _run(capfd, *command: str) -> tuple[int, str]:
    code = cli.main(["run", "--", *command])
    return code, capfd.readouterr().err


@pytest.mark.slow
def test_an_edited_script_is_named_and_still_runs(tuned, capfd):
    tuned.write_text("open('ran', 'w').close()\nx = 1  # another model\n")
    code, err = _run(capfd, "python", "train.py")
    assert code == 0 and (tuned.parent / "ran").exists()
    said = [line for line in err.splitlines() if WORD in line]
    assert len(said) == 1 and said[0].startswith("torchboost run: torchboost.toml was tuned for another version "
                                                 "of train.py (sha256 ")
    assert "then, " in said[0] and "now)" in said[0] and "re-run torchboost tune" in said[0]


@pytest.mark.slow
def test_the_twin_the_unchanged_script_gets_no_word(tuned, capfd):
    code, err = _run(capfd, "python3", "train.py")  # another spelling of the same interpreter
    assert code == 0 and WORD not in err


@pytest.mark.slow
def test_another_command_is_named(tuned, capfd):
    code, err = _run(capfd, "python", "train.py", "--epochs", "3")
    assert code == 0
    assert "was tuned for another command (command then: python train.py)" in err


@pytest.mark.slow
def test_a_users_own_file_is_not_checked(tuned, capfd):
    BoostConfig.off().to_toml(tuned.parent / "torchboost.toml")  # no record: nothing to compare
    tuned.write_text("pass\n")
    code, err = _run(capfd, "python", "train.py")
    assert code == 0 and WORD not in err


def _reads_of(name: str, monkeypatch) -> list[str]:
    """Every opening of a file called ``name`` for reading from now on (pathlib's too)."""
    import builtins
    import io

    seen: list[str] = []
    real_open = io.open

    def counting_open(file, mode="r", *args, **kwargs):
        if str(file).endswith(name) and "r" in mode:
            seen.append(str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(io, "open", counting_open)
    return seen


@pytest.mark.slow
def test_run_reads_the_configuration_once(tuned, capfd, monkeypatch):
    seen = _reads_of("torchboost.toml", monkeypatch)
    code, err = _run(capfd, "python", "train.py")
    assert code == 0 and "applying torchboost.toml: cpu.threads=1" in err
    assert len(seen) == 1, seen
    # the twin: a second read of the file is counted
    BoostConfig.from_toml(tuned.parent / "torchboost.toml")
    assert len(seen) == 2


@pytest.mark.slow
@pytest.mark.parametrize("in_a_rank", [True, False])
def test_a_torchrun_rank_does_not_hold_its_own_command_against_the_jobs(tuned, capfd, monkeypatch, in_a_rank):
    """tune recorded the job's command, `torchrun ... train.py`; each rank then runs `torchboost
    run -- python train.py`, which is no other command. Twin: the same line typed outside a job
    is another command than the file's, and is said."""
    header = "\n".join(TunedFor.of(["torchrun", "--standalone", "--nproc_per_node", "2", "train.py"]).lines())
    write_config(tuned.parent / "torchboost.toml", BoostConfig.off().replace(cpu={"threads": 1}), header)
    if in_a_rank:
        monkeypatch.setenv("LOCAL_RANK", "0")
        monkeypatch.setenv("RANK", "0")
    code, err = _run(capfd, "python", "train.py")
    assert code == 0
    assert (WORD in err) is not in_a_rank
