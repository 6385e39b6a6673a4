"""The doctor's report from hand-made facts: JSON schema, Markdown, HTML with plots, terminal."""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import sys
from dataclasses import replace

import pytest
from rich.console import Console

from _report_helpers import HOSTILE, data_bound_facts, findings_for
from torchboost.frameworks import fix_toml
from torchboost.diagnose import Facts, StepRecord
from torchboost.report import SCHEMA_VERSION, build_report, print_doctor_report, write_doctor_report

PNG_URI = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


@pytest.fixture()
def written(tmp_path):
    facts = data_bound_facts()
    findings = findings_for(facts)
    return facts, findings, write_doctor_report(facts, findings, tmp_path / "doctor")


def test_report_json_has_the_documented_schema(written):
    facts, findings, paths = written
    assert set(paths) == {"json", "md", "html"} and all(p.exists() for p in paths.values())

    def no_nan(token):
        raise AssertionError(f"non-JSON number {token} in report.json")

    report = json.loads(paths["json"].read_text(encoding="utf-8"), parse_constant=no_nan)
    for key in ("schema_version", "ended", "notes", "steps_observed", "step_time_ms", "breakdown_pct",
                "facts", "findings", "samples_per_s", "command", "trace"):
        assert key in report, key
    assert report["schema_version"] == SCHEMA_VERSION == 1
    assert report["steps_observed"] == 12 and report["ended"] == "stopped"
    assert set(report["step_time_ms"]) >= {"median", "p90"}
    assert set(report["breakdown_pct"]) == {"data", "forward", "backward", "optimizer", "checkpoint", "output", "other"}
    assert sum(report["breakdown_pct"].values()) == pytest.approx(100.0)
    neutral = [f.id for f in findings if not f.changes_training]
    assert [f["id"] for f in report["findings"]] == neutral
    assert [f["id"] for f in report["training_changes"]] == [f.id for f in findings if f.changes_training]
    assert report["findings"][0]["id"] == "data.workers"
    for entry in report["findings"] + report["training_changes"]:
        assert {"id", "title", "evidence", "fix", "expected_speedup", "unit", "changes_training"} <= set(entry)
        assert {"toml", "torch"} <= set(entry["fix"]) <= {"toml", "torch", "lightning", "accelerate", "transformers"}
    assert "lightning" in report["findings"][0]["fix"]  # [loader] num_workers has a spelling
    assert report["facts"]["losses"] == [2.3, 2.1, 2.0]  # a NaN loss: tests/diagnose/test_loss_nonfinite.py
    assert Facts.from_dict(report["facts"]).steps == facts.steps


def test_notes_say_how_the_run_ended():
    early = replace(data_bound_facts(7), ended="finished", target_steps=20)
    assert any("ended after 7 of 20 steps" in n for n in build_report(early, [])["notes"])
    crashed = replace(data_bound_facts(3), ended="crashed", exit_code=1)
    notes = build_report(crashed, [])["notes"]
    assert any("crashed (exit code 1) after 3" in n for n in notes)
    assert any("Only 3 steps measured" in n for n in notes)
    assert any("No training step" in n for n in build_report(Facts(), [])["notes"])


def test_markdown_mentions_every_finding_and_keeps_the_command(written):
    _, findings, paths = written
    text = paths["md"].read_text(encoding="utf-8")
    for f in findings:
        assert f"`{f.id}`" in text
    assert HOSTILE in text  # inside a code fence, verbatim
    assert "```toml\n[loader]\nnum_workers = 2" in text


def _png_images(html: str) -> list[bytes]:
    return [base64.b64decode(m, validate=True) for m in PNG_URI.findall(html)]


def test_html_embeds_two_decodable_pngs_and_escapes_user_text(written):
    import matplotlib.image

    _, findings, paths = written
    html = paths["html"].read_text(encoding="utf-8")
    images = _png_images(html)
    assert len(images) == 2
    for png in images:
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
        assert pixels.shape[0] > 50 and pixels.shape[1] > 200
    assert "<script>alert" not in html and "&lt;script&gt;alert" in html
    for f in findings:
        assert f'id="finding-{f.id}"' in html


def test_reports_without_any_step(tmp_path):
    paths = write_doctor_report(Facts(ended="crashed", exit_code=2), [], tmp_path)
    report = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert report["steps_observed"] == 0 and report["step_time_ms"]["median"] is None
    assert len(_png_images(paths["html"].read_text(encoding="utf-8"))) == 2
    assert "No finding." in paths["md"].read_text(encoding="utf-8")


def test_rewriting_replaces_the_files(tmp_path):
    facts = data_bound_facts()
    write_doctor_report(facts, findings_for(facts), tmp_path)
    paths = write_doctor_report(facts, [], tmp_path)
    assert json.loads(paths["json"].read_text(encoding="utf-8"))["findings"] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report.json", "report.md"]


def test_terminal_report_shows_the_top_finding_and_the_files(written):
    facts, findings, paths = written
    buf = io.StringIO()
    console = Console(file=buf, width=160, record=True, color_system=None)
    print_doctor_report(facts, findings, console, paths)
    out = buf.getvalue()
    assert "data.workers" in out and "top finding" in out
    assert "waits for data" in out  # the top finding's title
    assert str(paths["html"]) in out
    assert "[red]boom[/red]" in out  # user text printed as text, not as markup
    # The breakdown table lists each phase with its share.
    assert "waiting for data" in out and "60." in out


@pytest.mark.slow
def test_analysis_never_imports_matplotlib():
    code = (
        "import sys\n"
        "sys.path.insert(0, %r)\n"
        "from _report_helpers import data_bound_facts, findings_for\n"
        "from torchboost.report import build_report\n"
        "facts = data_bound_facts()\n"
        "build_report(facts, findings_for(facts))\n"
        "print('matplotlib' in sys.modules)\n"
    ) % str(__import__("pathlib").Path(__file__).parent)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_timeline_draws_one_bar_per_step():
    from torchboost.report.plots import timeline_png

    few = timeline_png([StepRecord(i, 10.0, 5.0, 2.0, 2.0, 1.0) for i in range(3)])
    many = timeline_png([StepRecord(i, 10.0 + i % 7, 5.0, 2.0, 2.0, 1.0) for i in range(40)])
    assert few.startswith(b"\x89PNG") and many.startswith(b"\x89PNG") and few != many


def _batch_change(speedup: float) -> "Finding":
    from torchboost.evidence.findings import Finding

    return Finding(id="memory.headroom", title="a batch 8x larger would take less time per sample",
                   evidence={"batch_factor": 8}, advice="no key", advice_code="DataLoader(..., batch_size=512)",
                   expected_speedup=speedup, formula="per sample", changes_training=True, unit="sample")


def test_a_fix_that_changes_training_is_listed_apart_never_ranked(tmp_path):
    facts = data_bound_facts()
    findings = findings_for(facts) + [_batch_change(9.0)]  # larger than every neutral speedup
    report = build_report(facts, findings)
    assert "memory.headroom" not in [f["id"] for f in report["findings"]]
    assert [f["id"] for f in report["training_changes"]] == ["memory.headroom"]
    assert report["training_changes"][0]["unit"] == "sample"
    paths = write_doctor_report(facts, findings, tmp_path)
    md = paths["md"].read_text()
    ranked, apart = md.split("## Would change what is trained")
    assert "memory.headroom" not in ranked and "memory.headroom" in apart and "per sample" in apart
    html = paths["html"].read_text()
    assert html.index("Would change what is trained") < html.index('id="finding-memory.headroom"')
    console = Console(width=80, record=True)
    print_doctor_report(facts, findings, console, paths)
    text = console.export_text()
    top = text.split("top finding:")[1].split("\n")[0]
    assert "memory.headroom" not in top and "per sample" in text


@pytest.mark.parametrize("width", [80, 140])
def test_doctor_terminal_fits_its_width_and_keeps_ids_and_fixes_whole(tmp_path, width):
    facts = data_bound_facts()
    findings = findings_for(facts)
    paths = write_doctor_report(facts, findings, tmp_path)
    console = Console(width=width, record=True)
    print_doctor_report(facts, findings, console, paths)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= width
    for f in findings:
        assert any(f.id in line for line in lines), f.id
    for fix_line in fix_toml(findings[0]).splitlines():  # the top finding's TOML, line by line
        assert any(fix_line.strip() in line for line in lines), fix_line


def test_one_outlier_step_does_not_set_the_timelines_scale():
    from torchboost.report.plots import robust_top

    steady = [10.0] * 19
    assert robust_top(steady) is None
    assert robust_top(steady + [1200.0]) == pytest.approx(15.0)  # 1.5 x the 90th percentile, marked above
    assert robust_top(steady + [25.0]) is None  # a slow step within 3x is data, not an outlier


def test_the_hottest_operators_are_tabled_per_step_with_their_share(tmp_path):
    facts = data_bound_facts()
    paths = write_doctor_report(facts, findings_for(facts), tmp_path)
    md = paths["md"].read_text()
    assert "| `aten::addmm` | 12.000 | 0.000 | 3 | 60.0% |" in md  # 24 ms and 6 calls over 2 steps
    html = paths["html"].read_text()
    table = html[html.index('<table id="hot-ops">'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") == 4 and "aten::addmm" in table
    assert "<script>alert" not in table  # the op name is text


def _host_side_facts() -> Facts:
    """The data-bound run, printing every step (0.5 ms) and saving a 20 ms checkpoint every 4 steps."""
    from torchboost.evidence.host_side import HostFacts

    facts = data_bound_facts()
    steps = [replace(s, output_ms=0.5, total_ms=s.total_ms + 0.5) for s in facts.steps]
    saving = [s.index for s in steps if s.index % 4 == 0]
    steps = [replace(s, checkpoint_ms=20.0, total_ms=s.total_ms + 20.0) if s.index in saving else s for s in steps]
    host = HostFacts(checkpoint_steps=saving, checkpoint_ms=[20.0] * len(saving),
                     checkpoint_bytes=[3_000_000] * len(saving), output_calls=len(steps))
    return replace(facts, steps=steps, host=host)


@pytest.mark.parametrize("measured", [True, False])
def test_the_host_parts_are_rows_of_every_phase_table_where_measured(tmp_path, measured):
    # The twin (measured=False): a run with no checkpoint write and no output shows neither row.
    facts = _host_side_facts() if measured else data_bound_facts()
    paths = write_doctor_report(facts, [], tmp_path)
    buf = io.StringIO()
    print_doctor_report(facts, [], Console(file=buf, width=160, color_system=None), paths)
    report = json.loads(paths["json"].read_text(encoding="utf-8"))
    texts = [buf.getvalue(), paths["md"].read_text(encoding="utf-8"), paths["html"].read_text(encoding="utf-8")]
    for label in ("checkpoint writes (torch.save)", "printing and logging"):
        assert all((label in text) == measured for text in texts), label
    assert any(n.startswith("torch.save ran every 4 steps (3 writes seen, 20.0 ms, 3.0 MB each)")
               for n in report["notes"]) == measured
    if measured:
        assert report["phase_ms"]["checkpoint"] == pytest.approx(20.0 * 3 / 12)
        assert sum(report["phase_ms"].values()) == pytest.approx(report["step_time_ms"]["mean"])
