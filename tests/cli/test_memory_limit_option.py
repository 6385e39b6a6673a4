"""`torchboost tune --memory-limit SIZE`: the size parser, and a bad size said in one line."""

from __future__ import annotations

import argparse

import pytest

from torchboost.cli import main
from torchboost.cli._inputs import parse_size
from torchboost.cli.tune import add_arguments, options_from_args
from torchboost.process.launch import UsageError

GiB, MiB = 2**30, 2**20


@pytest.mark.parametrize("text,expected", [
    ("12GiB", 12 * GiB),
    ("800MB", 800 * 10**6),  # MB: powers of 1000
    ("2048M", 2048 * MiB),  # M: powers of 1024, as docker --memory reads it
    ("12884901888", 12 * GiB),  # a byte count
    ("1.5g", 3 * GiB // 2),  # any case, a fraction
    (" 4 GiB ", 4 * GiB),
    ("512KiB", 512 * 1024),
    ("100b", 100),
])
def test_sizes_parse(text, expected):
    assert parse_size(text, "--memory-limit") == expected


@pytest.mark.parametrize("text", ["", "GiB", "12XB", "-1G", "0", "0.1", "nan", "inf", "1e9", "12 G B", "twelve"])
def test_bad_sizes_are_usage_errors_that_name_the_flag(text):
    with pytest.raises(UsageError, match="--memory-limit"):
        parse_size(text, "--memory-limit")


def _options(tmp_path, *argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return options_from_args(parser.parse_args(["--out", str(tmp_path / "out"), *argv]), config="t.toml")


def test_the_option_reaches_the_tuner_and_defaults_to_the_device(tmp_path):
    assert _options(tmp_path, "--memory-limit", "12GiB").memory_limit_bytes == 12 * GiB
    assert _options(tmp_path).memory_limit_bytes is None  # the tuner takes 90% of the device's memory


def test_a_bad_size_is_one_line_and_exit_2_before_anything_runs(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('never run')\n")
    out = tmp_path / "out"
    code = main(["tune", "--memory-limit", "12XB", "--out", str(out), "--", "python", str(script)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [
        "torchboost tune: error: --memory-limit expects a size like 12GiB, 800MB, 2048M or a number of bytes, "
        "got '12XB'"]
    assert not out.exists()  # said before the report folder is made, before the doctor runs
