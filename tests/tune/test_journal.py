"""The tuning journal: what --resume may replay, and what it must not."""

from __future__ import annotations

from torchboost.config import Overlay
from torchboost.techniques.cpu import CpuConfig
from torchboost.tune.trials.journal import Journal, RunJournal, identity
from torchboost.tune.trials.trial_result import TrialResult

THREADS = Overlay.of(CpuConfig, threads=1)


def _ident(tmp_path, text="print('train')\n", command=("python", "train.py")):
    script = tmp_path / "train.py"
    script.write_text(text)
    return identity(list(command), script)


def _write(tmp_path, ident, *results):
    journal = Journal(tmp_path / "journal.jsonl", ident=ident)
    for result in results:
        journal.append(result)
    return journal


def test_resume_replays_what_the_same_command_and_script_measured(tmp_path):
    ident = _ident(tmp_path)
    _write(tmp_path, ident, TrialResult(settings=THREADS, step_ms=[2.0, 2.0]))
    resumed = Journal(tmp_path / "journal.jsonl", resume=True, ident=ident)
    assert resumed.restarted is None
    assert resumed.lookup(THREADS.to_dict(), 0).step_ms == [2.0, 2.0]


def test_resume_with_an_edited_script_or_another_command_starts_fresh(tmp_path):
    _write(tmp_path, _ident(tmp_path), TrialResult(settings=THREADS, step_ms=[2.0]))
    edited = Journal(tmp_path / "journal.jsonl", resume=True, ident=_ident(tmp_path, "print('fixed')\n"))
    assert edited.restarted == "the script changed since the journal was written"
    assert edited.lookup(THREADS.to_dict(), 0) is None
    _write(tmp_path, _ident(tmp_path), TrialResult(settings=THREADS, step_ms=[2.0]))
    other = Journal(tmp_path / "journal.jsonl", resume=True,
                    ident=_ident(tmp_path, command=("python", "train.py", "--lr", "1")))
    assert other.restarted == "the command differs from the one the journal measured"
    assert other.lookup(THREADS.to_dict(), 0) is None


def test_a_failed_trial_runs_again_on_resume(tmp_path):
    ident = _ident(tmp_path)
    _write(tmp_path, ident, TrialResult(settings=THREADS, ok=False, error="crashed: ValueError"))
    assert Journal(tmp_path / "journal.jsonl", resume=True, ident=ident).lookup(THREADS.to_dict(), 0) is None


def test_a_torn_last_line_is_cut_before_the_next_is_appended(tmp_path):
    ident = _ident(tmp_path)
    _write(tmp_path, ident, TrialResult(settings=THREADS, step_ms=[2.0]))
    path = tmp_path / "journal.jsonl"
    with open(path, "a") as fh:
        fh.write('{"settings": {"cpu.threads": 2}, "repe')  # a kill mid-write
    resumed = Journal(path, resume=True, ident=ident)
    second = TrialResult(settings=Overlay.of(CpuConfig, threads=2), step_ms=[3.0])
    resumed.append(second)
    again = Journal(path, resume=True, ident=ident)
    assert again.lookup(second.settings.to_dict(), 0).step_ms == [3.0]  # not swallowed by the torn line
    assert again.lookup(THREADS.to_dict(), 0).step_ms == [2.0]


def test_the_run_journal_keys_its_runs_the_same_way(tmp_path):
    ident = _ident(tmp_path)
    written = RunJournal(tmp_path / "verify.jsonl", ident=ident)
    written.put("baseline-0", 4.5)
    written.put("tuned-0", 3.5, pace_ms=61.0)  # a capped run keeps its pace for the projection
    resumed = RunJournal(tmp_path / "verify.jsonl", resume=True, ident=ident)
    assert resumed.get("baseline-0") == 4.5 and resumed.pace("baseline-0") is None
    assert resumed.get("tuned-0") == 3.5 and resumed.pace("tuned-0") == 61.0
    changed = RunJournal(tmp_path / "verify.jsonl", resume=True, ident=_ident(tmp_path, "x = 1\n"))
    assert changed.get("baseline-0") is None and changed.restarted
