"""report.html in headless Chromium: both embedded plots load (skipped without Chromium)."""

from __future__ import annotations

import re

import pytest

from _report_helpers import CHROMIUM, data_bound_facts, findings_for, loaded_images
from torchboost.report import write_doctor_report

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="needs a chromium binary on PATH"),
]


def check_images_load(html_path, profile_dir) -> None:
    """Both plots decode in a real browser."""
    loaded, total = loaded_images(html_path, profile_dir)
    assert (loaded, total) == (2, 2), f"{loaded} of {total} images loaded"


def test_report_images_load_in_chromium(tmp_path):
    facts = data_bound_facts()
    paths = write_doctor_report(facts, findings_for(facts), tmp_path / "doctor")
    check_images_load(paths["html"], tmp_path / "profile")


def test_a_broken_image_is_detected(tmp_path):
    facts = data_bound_facts()
    paths = write_doctor_report(facts, findings_for(facts), tmp_path / "doctor")
    html = paths["html"].read_text(encoding="utf-8")
    # Keep the data URI valid base64 but make the bytes not a PNG.
    broken = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:image/png;base64,AAAAAAAA", html, count=1)
    paths["html"].write_text(broken, encoding="utf-8")
    with pytest.raises(AssertionError, match="1 of 2 images loaded"):
        check_images_load(paths["html"], tmp_path / "profile")
