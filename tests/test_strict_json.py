"""Every JSON file torchboost writes parses with non-finite constants refused, and reads back whole."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from torchboost import _json as strict_json

SCRIPT = Path(__file__).resolve().parent / "scripts" / "nan_loss.py"


def _refuse(token: str) -> float:
    raise ValueError(f"non-finite constant {token}")


def test_non_finite_numbers_are_written_as_null_named_and_read_back():
    data = {"losses": [1.0, math.nan, math.inf], "a/b": {"x": -math.inf}, "ok": 2.5}
    text = strict_json.dumps(data)
    strict = json.loads(text, parse_constant=_refuse)
    assert strict["losses"] == [1.0, None, None]
    assert strict["non_finite"] == {"/losses/1": "nan", "/losses/2": "inf", "/a~1b/x": "-inf"}
    back = strict_json.loads(text)
    assert math.isnan(back["losses"][1]) and back["losses"][2] == math.inf and back["a/b"]["x"] == -math.inf
    assert "non_finite" not in back and back["ok"] == 2.5


def test_twin_pythons_own_json_writes_tokens_a_strict_parser_refuses():
    with pytest.raises(ValueError, match="non-finite constant NaN"):
        json.loads(json.dumps({"losses": [math.nan]}), parse_constant=_refuse)


@pytest.mark.slow
def test_every_json_file_of_a_nan_loss_doctor_and_tune_run_is_strict(tmp_path):
    """A loss NaN from step 0: the doctor's and tune's files (facts, reports, journals, the
    outcome) all parse strictly, and facts.json still says the loss was NaN."""
    doctor = subprocess.run([sys.executable, "-m", "torchboost.cli", "doctor", "--out", str(tmp_path / "doctor"), "--",
                             sys.executable, str(SCRIPT)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert doctor.returncode == 0, doctor.stderr[-2000:]
    tune = subprocess.run([sys.executable, "-m", "torchboost.cli", "tune", "--budget", "60", "--out",
                           str(tmp_path / "tune"), "--config", str(tmp_path / "torchboost.toml"), "--",
                           sys.executable, str(SCRIPT)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    written = sorted(p for p in tmp_path.rglob("*") if p.suffix in (".json", ".jsonl") and p.is_file()
                     and "trace" not in p.name)
    assert any(p.name == "facts.json" for p in written) and any(p.name == "journal.jsonl" for p in written), \
        (tune.returncode, tune.stderr[-2000:], written)
    for path in written:
        lines = path.read_text(encoding="utf-8").splitlines() if path.suffix == ".jsonl" else [path.read_text()]
        for line in filter(str.strip, lines):
            json.loads(line, parse_constant=_refuse)
    facts = strict_json.loads((tmp_path / "doctor" / "facts.json").read_text(encoding="utf-8"))
    assert math.isnan(facts["losses"][0])
