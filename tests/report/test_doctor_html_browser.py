"""report.html in headless Chromium: both embedded plots load (skipped without Chromium)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from _report_helpers import data_bound_facts, findings_for
from torchboost.report import write_doctor_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="needs a chromium binary on PATH"),
]


def _loaded_images(html_path, profile_dir) -> tuple[int, int]:
    """(loaded, total) images as the page's own script counts them after load."""
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--no-first-run", f"--user-data-dir={profile_dir}", "--virtual-time-budget=5000",
         "--dump-dom", html_path.as_uri()],
        capture_output=True, text=True, timeout=90,
    )
    body = re.search(r"<body[^>]*>", out.stdout)
    assert body, f"no <body> in chromium's DOM dump; stderr: {out.stderr[-2000:]}"
    loaded = re.search(r'data-images-loaded="(\d+)"', body.group(0))
    total = re.search(r'data-images-total="(\d+)"', body.group(0))
    assert loaded and total, f"the page's load script did not run: {body.group(0)}"
    return int(loaded.group(1)), int(total.group(1))


def check_images_load(html_path, profile_dir) -> None:
    """Both plots decode in a real browser."""
    loaded, total = _loaded_images(html_path, profile_dir)
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
