"""The tuner's report from searches over fake measurements: JSON schema, Markdown, HTML with
the waterfall plot (decoded, and loaded in headless Chromium when present), terminal."""

from __future__ import annotations

import base64
import io
import itertools
import json
import re

import pytest
from rich.console import Console

from _report_helpers import CHROMIUM, loaded_images, overflowing
from torchboost.diagnose import Facts, Finding, LoaderFacts, StepRecord
from torchboost.report.tune_report import TUNE_SCHEMA_VERSION, build_tune_report, print_tune_report, write_tune_report
from torchboost.techniques.compile import CompileTuning
from torchboost.techniques.precision import PrecisionTuning
from torchboost.tune.search.levers import TuneContext, default_levers
from torchboost.tune.tuner import TuneRun, settings_to_config
from torchboost.tune.search import SearchOptions, run_search
from torchboost.tune.report_data import tune_summary
from torchboost.tune.trials.trial_result import TrialResult

HOSTILE = '<script>alert("x")</script> [red]boom[/red] | `tick`'
"""User text that must stay text in every format."""

CPU2 = TuneContext(device="cpu", cpu_cores=2, tuning=(PrecisionTuning(cpu_bf16=False), CompileTuning(can_compile=True)))
BASE_LOSSES = [2.0 - 0.05 * i for i in range(20)]
# A 2-core loader-bound script: ms per step by (loader workers, intra-op threads).
HOST_MS = {(0, 2): 84.0, (2, 2): 88.0, (1, 2): 127.0, (2, 1): 62.0, (1, 1): 95.0}
PNG_URI = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


class FakeScript:
    """Step time = host time x per-setting factors, with a little deterministic noise;
    settings in ``crash`` fail, settings in ``losses`` change the loss curve."""

    def __init__(self, factors=None, losses=None, crash=(), compile_s=0.0, noise=0.01):
        self.factors = factors or {}
        self.losses = losses or {}
        self.crash = set(crash)
        self.compile_s = compile_s
        self.noise = itertools.cycle([1.0, 1.0 + noise, 1.0 - noise])

    def __call__(self, settings, repeat, **_):
        if any(item in self.crash for item in settings.items()):
            return TrialResult(settings=dict(settings), repeat=repeat, ok=False, error=f"exit code 1: {HOSTILE}")
        ms = HOST_MS.get((settings.get("loader.num_workers", 0), settings.get("cpu.threads", 2)), 100.0)
        losses = list(BASE_LOSSES)
        for item in settings.items():
            ms *= self.factors.get(item, 1.0)
            losses = self.losses.get(item, losses)
        compile_s = self.compile_s if settings.get("compile.mode", "off") != "off" else 0.0
        return TrialResult(settings=dict(settings), repeat=repeat, step_ms=[ms * next(self.noise)] * 5,
                           losses=losses, samples_per_step=32, compile_s=compile_s)


def _facts() -> Facts:
    return Facts(env={"device": "cpu", "cpu_cores": 2}, command=["python", "train.py", "--tag", HOSTILE],
                 steps=[StepRecord(i, 84.0, data_ms=50.0) for i in range(5)],
                 loader=LoaderFacts(num_workers=0, batch_size=32))


def _findings() -> list[Finding]:
    def finding(fid, title, gain):
        return Finding(id=fid, title=title, evidence={}, expected_speedup=gain, formula="")

    # Out of order on purpose: the report ranks them.
    return [finding("precision.slower_on_cpu", "bf16 is slower than fp32 on this CPU", 1.1),
            finding("data.workers", f"The loop waits for data {HOSTILE}", 1.6)]


def _tune_run(script: FakeScript, run_steps: int | None, reused: int = 0, **search) -> TuneRun:
    outcome = run_search(default_levers(), CPU2, script, SearchOptions(run_steps=run_steps, **search))
    return TuneRun(facts=_facts(), findings=_findings(), outcome=outcome, config=settings_to_config(outcome.settings),
                   run_steps=run_steps, reused_trials=reused, steps_per_trial=60)


def mixed_run() -> TuneRun:
    """Workers kept; bf16 1.8x slower; compile faster but not repaid in 500 steps; fused
    optimizer crashes, foreach no faster; deeper prefetch changes the loss."""
    script = FakeScript(
        factors={("precision.mode", "bf16"): 1.8, ("compile.mode", "default"): 0.9},
        losses={("loader.prefetch_factor", 4): [x * 1.15 for x in BASE_LOSSES]},
        crash=[("optimizer.implementation", "fused")], compile_s=30.0, noise=0.0,
    )
    return _tune_run(script, run_steps=500, reused=4)


def skipped_compile_run() -> TuneRun:
    """A 20-step run: compile cannot pay off and is not even tried."""
    return _tune_run(FakeScript(factors={("compile.mode", "default"): 0.5}, compile_s=30.0), run_steps=20)


def _config_file(tmp_path, run: TuneRun):
    """torchboost.toml as the tune writes it (the run then says it was written)."""
    path = tmp_path / "torchboost.toml"
    run.config.to_toml(path, header=f"written by the test {HOSTILE}")
    run.written = bool(run.settings)
    return path


@pytest.fixture()
def written(tmp_path):
    run = mixed_run()
    config_path = _config_file(tmp_path, run)
    return run, config_path, write_tune_report(tune_summary(run, config_path=config_path), tmp_path / "tune")


def test_report_json_has_the_documented_schema(written):
    run, config_path, paths = written
    assert set(paths) == {"json", "md", "html"} and all(p.exists() for p in paths.values())

    def no_nan(token):
        raise AssertionError(f"non-JSON number {token} in report.json")

    report = json.loads(paths["json"].read_text(encoding="utf-8"), parse_constant=no_nan)
    for key in ("schema_version", "kind", "command", "status", "error", "before", "after", "speedup", "settings",
                "waterfall", "decisions", "precision", "findings", "trials", "run_steps", "stopped_by_budget",
                "elapsed_s", "config", "notes", "samples_per_step"):
        assert key in report, key
    assert report["schema_version"] == TUNE_SCHEMA_VERSION == 1 and report["kind"] == "tune"
    assert report["status"] == "tuned" and report["error"] is None
    assert report["speedup"] == pytest.approx(84 / 62)
    assert report["before"] == {"ms_per_step": 84.0, "samples_per_s": pytest.approx(32e3 / 84)}
    assert report["after"]["ms_per_step"] == pytest.approx(62.0)
    assert report["settings"] == {"loader.num_workers": 2, "loader.persistent_workers": True, "cpu.threads": 1}
    assert [w["label"] for w in report["waterfall"]] == ["baseline", "+ loader workers + CPU threads"]
    kept = report["waterfall"][1]
    assert kept["samples_per_s"] == pytest.approx(32e3 / 62) and kept["ratios"]
    assert kept["step_ms_range"][0] <= kept["ms_per_step"] <= kept["step_ms_range"][1]
    statuses = {d["status"] for d in report["decisions"]}
    assert statuses == {"kept", "screened_out", "not_beyond_noise", "slower", "not_repaid", "incorrect", "failed"}
    for d in report["decisions"]:
        assert {"lever", "technique", "settings", "change", "status", "reason", "ratio", "ratios",
                "ms_per_step", "break_even_steps", "break_even", "verdict"} <= set(d)
    compile_decision = next(d for d in report["decisions"] if d["lever"] == "compile")
    assert compile_decision["status"] == "not_repaid"
    assert compile_decision["break_even_steps"] == pytest.approx(30_000 / 6.2, rel=0.02)
    assert compile_decision["break_even"] == "after 4,839 steps (the run has 500 steps); compile 30.0 s cold, 30.0 s warm"
    assert (compile_decision["compile_cold_s"], compile_decision["compile_warm_s"]) == (30.0, 30.0)
    assert report["precision"] == ["bf16 was 1.8x slower here: rejected"]
    assert [f["id"] for f in report["findings"]] == ["data.workers", "precision.slower_on_cpu"]
    assert report["trials"] == {"total": run.outcome.trials_run, "run": run.outcome.trials_run - 4, "reused": 4,
                                "steps": 60}
    assert "60 measured steps each" in " ".join(report["notes"])
    assert report["run_steps"] == 500 and report["stopped_by_budget"] is False
    assert report["config"] == {"path": str(config_path), "toml": config_path.read_text(encoding="utf-8"),
                                "state": "written"}
    assert report["command"][-1] == HOSTILE


def test_markdown_mentions_every_status_and_the_break_even(written, tmp_path):
    run, config_path, paths = written
    text = paths["md"].read_text(encoding="utf-8")
    for status in ("kept", "slower", "not_repaid", "incorrect", "failed"):
        assert f"| **{status}** |" in text, status
    assert "break-even after 4,839 steps (the run has 500 steps)" in text
    assert "**bf16 was 1.8x slower here: rejected**" in text
    assert "4 reused from the journal" in text and "Planned run: 500 steps" in text
    assert "1. `data.workers` expected x1.60" in text
    assert "```toml\n# written by the test" in text and str(config_path) in text
    assert HOSTILE in text  # the command, verbatim inside its code fence
    assert "\\| `tick`" in text  # a "|" in a table cell is escaped, so the row keeps its columns
    assert "waits for data \\<script>" in text  # and a "<" cannot open an HTML tag where Markdown is rendered

    short = write_tune_report(tune_summary(skipped_compile_run()), tmp_path / "short")
    skipped = short["md"].read_text(encoding="utf-8")
    assert "| **skipped** |" in skipped
    assert "break-even at least" in skipped and "(the run has 20 steps)" in skipped


def _png_images(html: str) -> list[bytes]:
    return [base64.b64decode(m, validate=True) for m in PNG_URI.findall(html)]


def test_html_embeds_a_decodable_waterfall_and_escapes_user_text(written):
    import matplotlib.image

    run, _, paths = written
    html = paths["html"].read_text(encoding="utf-8")
    images = _png_images(html)
    assert len(images) == 1 and 'id="plot-waterfall"' in html
    pixels = matplotlib.image.imread(io.BytesIO(images[0]), format="png")
    assert pixels.shape[0] > 150 and pixels.shape[1] > 300
    assert "<script>alert" not in html and "&lt;script&gt;alert" in html
    assert html.count('<tr id="decision-') == len(run.outcome.decisions)
    assert "bf16 was 1.8x slower here: rejected" in html
    assert "after 4,839 steps" in html


def test_waterfall_plot_changes_with_its_bars():
    from torchboost.report._tune_html import waterfall_png

    report = build_tune_report(tune_summary(mixed_run()))
    one = waterfall_png(report["waterfall"][:1])
    two = waterfall_png(report["waterfall"])
    empty = waterfall_png([])
    assert all(p.startswith(b"\x89PNG\r\n\x1a\n") for p in (one, two, empty))
    assert len({one, two, empty}) == 3


def _terminal(run: TuneRun, paths, config_path, width: int = 220) -> str:
    buf = io.StringIO()
    summary = tune_summary(run, config_path=config_path)
    print_tune_report(summary, Console(file=buf, width=width, color_system=None), paths)
    return buf.getvalue()


def test_terminal_reads_as_a_before_after(written):
    run, config_path, paths = written
    out = _terminal(run, paths, config_path)
    assert "Before: 84.0 ms/step (381 samples/s)" in out and "After: 62.0 ms/step (516 samples/s)" in out
    assert "1.35x faster" in out
    assert "bf16 was 1.8x slower here: rejected" in out
    assert "torch.compile break-even: after 4,839 steps (the run has 500 steps)" in out
    for status in ("kept", "slower", "not_repaid", "incorrect", "failed"):
        assert re.search(rf"^  {status}\s+(n/a|\d\.\d{{3}})  ", out, re.MULTILINE), status
    assert "[red]boom[/red]" in out  # the crash message and command: text, not markup
    for path in (*paths.values(), config_path):
        assert str(path) in out
    assert "it changes: cpu.threads=1, loader.num_workers=2, loader.persistent_workers=True" in out


@pytest.mark.parametrize("width", [80, 140])
def test_terminal_fits_its_width_and_never_splits_a_setting(written, width, tmp_path, monkeypatch):
    run, config_path, paths = written
    # Paths relative to the folder, as its user sees them: the line count below must not
    # depend on how deep the test's own folder is.
    monkeypatch.chdir(tmp_path)
    paths = {kind: path.relative_to(tmp_path) for kind, path in paths.items()}
    out = _terminal(run, paths, config_path.relative_to(tmp_path), width=width)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= width
    report = json.loads(paths["json"].read_text())
    shown = [d for d in report["decisions"] if d["status"] != "screened_out"]  # those are counted, in one line
    for decision in shown:
        for setting in decision["change"].split(", "):  # each "name=value" whole on one line
            assert any(setting in line for line in lines), setting
    assert f"{len(report['decisions']) - len(shown)} candidates: another of the same technique" in out
    assert len(lines) < 40 + 3 * len(shown)  # a candidate takes a line or three, not a table's ten


def test_budget_and_unknown_run_length_are_said(tmp_path):
    ticks = itertools.count()
    outcome = run_search(default_levers(), CPU2, FakeScript(), SearchOptions(budget_s=3), clock=lambda: next(ticks))
    run = TuneRun(facts=None, findings=[], outcome=outcome, config=settings_to_config(outcome.settings),
                  run_steps=None, reused_trials=0)
    report = build_tune_report(tune_summary(run))
    assert report["stopped_by_budget"] is True and report["status"] == "unchanged"
    assert any("time budget stopped the search" in n for n in report["notes"])
    assert any("run length is unknown" in n for n in report["notes"])
    assert report["config"]["path"] is None and "[loader]" in report["config"]["toml"]
    text = write_tune_report(tune_summary(run), tmp_path)["md"].read_text(encoding="utf-8")
    assert "time budget stopped the search" in text and "No finding." in text
    out = _terminal(run, {}, tmp_path / "torchboost.toml")
    assert "nothing changed" in out and "time budget stopped" in out
    assert "torchboost.toml: not written: nothing to change" in out and "it changes" not in out


def test_failed_baseline_still_writes_a_report(tmp_path):
    def crash(settings, repeat, **_):
        return TrialResult(settings=settings, repeat=repeat, ok=False, error=f"exit code 3 {HOSTILE}")

    outcome = run_search(default_levers(), CPU2, crash)
    run = TuneRun(facts=_facts(), findings=[], outcome=outcome, config=settings_to_config({}), run_steps=None,
                  reused_trials=0)
    paths = write_tune_report(tune_summary(run, config_path=tmp_path / "torchboost.toml"), tmp_path)
    report = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert report["status"] == "failed" and "exit code 3" in report["error"]
    assert report["waterfall"] == [] and report["config"]["toml"] is None
    assert "Not written: the baseline did not run." in paths["md"].read_text(encoding="utf-8")
    assert len(_png_images(paths["html"].read_text(encoding="utf-8"))) == 1
    out = _terminal(run, paths, tmp_path / "torchboost.toml")
    assert "Not tuned" in out and "[red]boom[/red]" in out and "was not written" in out


def test_a_pick_the_end_to_end_check_rejected_is_never_shown_as_the_after(tmp_path):
    import dataclasses

    from torchboost.tune.verify.end_to_end import EndToEnd

    searched = mixed_run()  # the search kept 62 ms/step against 84
    e2e = EndToEnd(baseline_runs_s=[9.9, 9.8, 10.0], tuned_runs_s=[10.0, 9.9, 10.1])
    rejected = dataclasses.replace(searched, config=settings_to_config({}), end_to_end=e2e,
                                   verdict="not kept: end to end the tuned configuration took 10.0 s")
    config_path = _config_file(tmp_path, rejected)
    paths = write_tune_report(tune_summary(rejected, config_path=config_path), tmp_path / "tune")
    out = _terminal(rejected, paths, config_path)
    assert "After: the same" in out and "After: 62.0" not in out
    assert "the search's pick ran 62.0 ms/step in its trials, 1.35x; it did not hold end to end" in out
    # One story: the pick was faster in the search and did not hold, never "nothing was faster".
    assert "the search's pick did not hold end to end: nothing changed" in out
    assert "nothing was faster beyond noise" not in out
    from torchboost.tune.tuner import toml_header

    header = toml_header(rejected, ["python", "train.py"])
    assert "the search's pick did not hold end to end: nothing changed" in header and "beyond noise" not in header
    md = paths["md"].read_text(encoding="utf-8")
    assert "after: the same, nothing was kept; the search's pick ran 62.0 ms/step" in md and "after 62.0" not in md
    # Nothing written, nothing to run it under: `torchboost run` would only add its start-up.
    assert "use it: nothing changed: run your script as you did before" in out and "use it: torchboost run" not in out
    assert "Use it: nothing changed" in md
    # Twin: the same search confirmed end to end shows its figures as the after.
    kept = _terminal(searched, *_paths_of(searched, tmp_path / "kept"))
    assert "After: 62.0 ms/step" in kept and "After: the same" not in kept
    # the file was written in another folder than this one: run is told where it is
    assert f"use it: torchboost run --config {tmp_path / 'kept' / 'torchboost.toml'} -- python train.py" in kept
    assert "kept " in toml_header(searched, ["python", "train.py"])


def test_twin_a_search_that_kept_nothing_says_nothing_was_faster(tmp_path):
    import dataclasses

    from torchboost.report import _tune_text
    from torchboost.tune.tuner import toml_header

    searched = mixed_run()
    unchanged = {"search_speedup": 1.0, "end_to_end": None}
    assert _tune_text.unchanged(unchanged).startswith("nothing was faster beyond noise")
    nothing = dataclasses.replace(searched, config=settings_to_config({}),
                                  outcome=dataclasses.replace(searched.outcome, decisions=[]))
    assert "no technique was faster beyond noise" in toml_header(nothing, ["python", "train.py"])


def _paths_of(run: TuneRun, folder):
    folder.mkdir()
    config_path = _config_file(folder, run)
    return write_tune_report(tune_summary(run, config_path=config_path), folder / "tune"), config_path


def test_kept_and_incorrect_reduced_precision_are_said():
    close = [x * 1.005 for x in BASE_LOSSES]
    faster = _tune_run(FakeScript(factors={("precision.mode", "bf16"): 0.6}, losses={("precision.mode", "bf16"): close},
                                  noise=0.0), run_steps=None)
    assert build_tune_report(tune_summary(faster))["precision"] == ["bf16 was 1.67x faster here: kept"]
    nan = BASE_LOSSES[:3] + [float("nan")] * 17
    wrong = _tune_run(FakeScript(factors={("precision.mode", "bf16"): 0.5}, losses={("precision.mode", "bf16"): nan}),
                      run_steps=None)
    report = build_tune_report(tune_summary(wrong))
    assert report["precision"] == ["bf16 changed the training loss beyond tolerance: incorrect, rejected"]
    assert report["settings"].get("precision.mode") is None


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs a chromium binary on PATH")
def test_waterfall_loads_in_chromium_and_a_broken_one_is_caught(written, tmp_path):
    _, _, paths = written
    assert loaded_images(paths["html"], tmp_path / "profile") == (1, 1)
    html = paths["html"].read_text(encoding="utf-8")
    # The broken twin: valid base64, but not a PNG, must be reported as not loaded.
    broken = tmp_path / "broken.html"
    broken.write_text(re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:image/png;base64,AAAAAAAA", html),
                      encoding="utf-8")
    assert loaded_images(broken, tmp_path / "profile") == (0, 1)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs a chromium binary on PATH")
@pytest.mark.parametrize("width", [1280, 800])
def test_the_tune_page_fits_at_1280_and_800_pixels(written, tmp_path, width):
    _, _, paths = written
    assert overflowing(paths["html"], tmp_path / "profile", width) == "none"
    html = paths["html"].read_text()
    # settings are never broken inside a name: one per line, each unbreakable
    assert "code.setting { white-space: nowrap; }" in html and "break-all" not in html
    assert '<code class="setting">loader.sharing_strategy=file_system</code>' in html


def test_the_tune_command_prints_and_writes_this_report(tmp_path):
    from torchboost.cli.tune import print_outcome
    from torchboost.tune.tuner import TuneOptions

    run = mixed_run()
    options = TuneOptions(out_dir=tmp_path / "tune", config_path=_config_file(tmp_path, run))
    buf = io.StringIO()
    print_outcome(run, options, Console(file=buf, width=200, color_system=None))
    assert sorted(p.name for p in options.out_dir.iterdir()) == ["report.html", "report.json", "report.md"]
    out = buf.getvalue()
    assert "1.35x faster" in out and str(options.config_path) in out


# -- peak memory ---------------------------------------------------------------------------

GiB, MiB = 2**30, 2**20


class MemoryScript(FakeScript):
    """The loader-bound script, peaking at 900 MiB; deeper prefetch is 20% faster but peaks
    at 3 GiB."""

    def __call__(self, settings, repeat, **_):
        result = super().__call__(settings, repeat)
        result.peak_memory_bytes = 3 * GiB if settings.get("loader.prefetch_factor") == 4 else 900 * MiB
        return result


def memory_run(limit: int) -> TuneRun:
    context = TuneContext(device="cpu", cpu_cores=2, memory_limit_bytes=limit, tuning=(CompileTuning(can_compile=False),))
    outcome = run_search(default_levers(), context, MemoryScript(factors={("loader.prefetch_factor", 4): 0.8}, noise=0.0),
                         SearchOptions())
    return TuneRun(facts=_facts(), findings=[], outcome=outcome, config=settings_to_config(outcome.settings),
                   run_steps=None, reused_trials=0)


def test_peak_memory_and_the_limit_are_in_report_json_and_every_format(tmp_path):
    paths = write_tune_report(tune_summary(memory_run(2 * GiB)), tmp_path)
    report = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert report["memory"] == {"limit_bytes": 2 * GiB, "limit_source": "given with --memory-limit",
                                "before_peak_bytes": 900 * MiB, "after_peak_bytes": 900 * MiB}
    assert all(w["peak_memory_bytes"] == 900 * MiB for w in report["waterfall"])
    prefetch = next(d for d in report["decisions"] if d["change"] == "loader.prefetch_factor=4")
    assert prefetch["status"] == "over_memory" and prefetch["peak_memory_bytes"] == 3 * GiB
    assert prefetch["verdict"] == "deeper prefetch peaked at 3.00 GiB, over the memory limit: rejected"
    assert "loader.prefetch_factor" not in report["settings"]
    measured = [d for d in report["decisions"] if d["status"] not in ("skipped", "failed")]
    assert measured and all(d["peak_memory_bytes"] for d in measured)

    text = paths["md"].read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if "`loader.prefetch_factor=4`" in line)
    assert "| **over_memory** |" in row and "| 3.00 GiB |" in row
    kept = next(line for line in text.splitlines() if "| **kept** |" in line)
    assert "| 900 MiB |" in kept
    assert "Peak memory: 900 MiB before, 900 MiB after; limit 2.00 GiB (given with --memory-limit)." in text
    assert "- **over_memory**: its peak memory was over the memory limit" in text

    html = paths["html"].read_text(encoding="utf-8")
    assert 'class="status-over_memory">over_memory<' in html and "3.00 GiB" in html
    assert "limit 2.00 GiB (given with --memory-limit)" in html

    out = _terminal(memory_run(2 * GiB), paths, tmp_path / "torchboost.toml", width=80)
    assert re.search(r"^  over_memory\s+0\.800  3\.00 GiB  loader\.prefetch_factor=4", out, re.MULTILINE)
    assert re.search(r"^  kept\s+\d\.\d{3}   900 MiB  ", out, re.MULTILINE)
    assert "limit 2.00 GiB" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_under_a_higher_limit_the_same_change_is_kept_and_reported_with_its_peak():
    """The twin: the limit above deeper prefetch's 3 GiB, and it is kept."""
    report = build_tune_report(tune_summary(memory_run(4 * GiB)))
    prefetch = next(d for d in report["decisions"] if d["change"] == "loader.prefetch_factor=4")
    assert prefetch["status"] == "kept" and report["settings"]["loader.prefetch_factor"] == 4
    assert report["waterfall"][-1]["peak_memory_bytes"] == 3 * GiB
    assert report["memory"]["after_peak_bytes"] == 3 * GiB


def test_a_change_the_search_kept_is_said_kept_only_where_it_was_written():
    """The summary's line for a kept change follows the pick: written (kept), refuted end to
    end (not kept), written apart (unverified). Twin: a rejected change reads the same in all."""
    from torchboost.report._tune_text import verdict

    kept = {"subject": "bf16", "status": "kept", "ratio": 0.5, "reason": "median ratio 0.5"}
    assert verdict(kept, "tuned") == "bf16 was 2x faster here: kept"
    assert verdict(kept, "unchanged") == "bf16 was 2x faster a step in the search, but the pick did not hold end to end: not kept"
    assert verdict(kept, "unverified").endswith("written apart, to torchboost.unverified.toml, until verified end to end")
    rejected = {**kept, "status": "slower", "ratio": 1.8}
    assert {verdict(rejected, pick) for pick in ("tuned", "unchanged", "unverified")} == {"bf16 was 1.8x slower here: rejected"}
