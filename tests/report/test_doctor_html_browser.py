"""report.html in headless Chromium: both embedded plots load (skipped without Chromium)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from _report_helpers import CHROMIUM, data_bound_facts, findings_for, loaded_images, overflowing
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


def _long_lines(findings):
    # nanoGPT's fix lines are long: one unbroken 150-character line, as such a script has.
    first = dataclasses.replace(findings[0], advice_code="loader = torch.utils.data.DataLoader(train_dataset, "
                                "batch_size=batch_size, shuffle=True, num_workers=2, pin_memory=True, "
                                "persistent_workers=True, prefetch_factor=4)")
    return [first, *findings[1:]]


@pytest.mark.parametrize("width", [1280, 800])
def test_nothing_runs_out_of_its_box(tmp_path, width):
    facts = data_bound_facts()
    paths = write_doctor_report(facts, _long_lines(findings_for(facts)), tmp_path / "doctor")
    assert overflowing(paths["html"], tmp_path / "profile", width) == "none"


def test_an_overflowing_box_is_caught(tmp_path):
    """The broken twin: a fix box forced wider than its card."""
    facts = data_bound_facts()
    paths = write_doctor_report(facts, findings_for(facts), tmp_path / "doctor")
    html = paths["html"].read_text(encoding="utf-8")
    paths["html"].write_text(html.replace("</style>", ".fixes pre { white-space: pre; overflow-x: visible; "
                                                      "width: 2000px; }</style>"), encoding="utf-8")
    assert overflowing(paths["html"], tmp_path / "profile", 1280) != "none"
