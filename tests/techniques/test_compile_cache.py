"""The compile cache torchboost's runs share: torchboost's folder, or the user's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from torchboost.techniques.compile.compile_cache import CACHE_ENV, cache_folder, compile_cache_env


def test_torchboost_keeps_its_cache_in_the_users_cache_folder(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    assert compile_cache_env(env) == {CACHE_ENV: str(tmp_path / "torchboost" / "inductor")}
    assert (tmp_path / "torchboost" / "inductor").is_dir()


def test_a_folder_the_user_chose_is_kept(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path), CACHE_ENV: str(tmp_path / "mine")}
    assert compile_cache_env(env) == {}
    assert cache_folder(env) == tmp_path / "mine"
    assert not (tmp_path / "torchboost").exists()


@pytest.mark.slow
def test_torchboost_run_gives_the_script_that_folder_and_says_so(tmp_path):
    script = tmp_path / "show.py"
    script.write_text(f"import os, json; json.dump(os.environ.get({CACHE_ENV!r}), open('seen.json', 'w'))\n")
    (tmp_path / "torchboost.toml").write_text("[loader]\nnum_workers = 0\n")
    env = {k: v for k, v in os.environ.items() if k != CACHE_ENV}
    for user_set in (False, True):
        run_env = {**env, "XDG_CACHE_HOME": str(tmp_path / "cache"), **({CACHE_ENV: "/x/mine"} if user_set else {})}
        proc = subprocess.run([sys.executable, "-m", "torchboost.cli", "run", "--", "python", str(script)],
                              cwd=tmp_path, env=run_env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        seen = json.loads((tmp_path / "seen.json").read_text())
        if user_set:  # twin: the user's folder stands, and nothing is said
            assert seen == "/x/mine" and "compile cache" not in proc.stderr
        else:
            assert seen == str(tmp_path / "cache" / "torchboost" / "inductor")
            assert f"compile cache: {seen}" in proc.stderr
