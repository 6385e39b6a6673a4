"""The version comes from its own module: the reports stamp it without importing the Booster."""

from __future__ import annotations

import subprocess
import sys

import pytest

import torchboost
from torchboost._version import __version__


def _imports_booster(code: str) -> bool:
    probe = f"import sys\n{code}\nprint('torchboost.booster' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    return out.stdout.strip().splitlines()[-1] == "True"


def test_the_package_re_exports_the_version():
    assert torchboost.__version__ == __version__ and "__version__" in torchboost.__all__


@pytest.mark.slow
def test_importing_a_report_does_not_import_the_booster():
    assert not _imports_booster("import torchboost.report.doctor_report, torchboost.report.tune_report")
    # The twin: asking the package for the Booster does import it.
    assert _imports_booster("import torchboost\ntorchboost.Booster")


def test_the_public_names_are_all_there():
    for name in torchboost.__all__:
        assert getattr(torchboost, name) is not None, name
    assert torchboost.Booster.__name__ == "Booster" and torchboost.load_config is not None
    from torchboost import Booster, BoostConfig, CheckpointError  # noqa: F401 - from-imports resolve too
