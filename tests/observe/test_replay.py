"""The replay probe: after the profiler window, steps fed from memory, with no loader work."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from torchboost.cli import main
from torchboost.observe import ObserveSpec, StepRecorder, StopObserving
from torchboost.reach.loader_patch import timed_iteration
from torchboost.observe.probes.replay import REPLAY_STEPS

SCRIPTS = Path(__file__).parents[1] / "scripts"


class _Clock:
    """The recorder's and the loader patch's clock: it moves only by what the loop says it took."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Counted(Dataset):
    def __init__(self, fetch_s: float, samples: int = 10_000, clock: _Clock | None = None) -> None:
        self.fetched = 0
        self.fetch_s = fetch_s
        self.samples = samples
        self.clock = clock or _Clock()

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, i: int) -> torch.Tensor:
        self.fetched += 1
        self.clock.now += self.fetch_s
        return torch.full((4,), float(i))


def _run(tmp_path, fetch_s: float = 0.002, work_s: float = 0.0, samples: int = 10_000,
         **spec_kw) -> tuple[StepRecorder, list[int], int]:
    """A loop of 40 steps under the loader patch (or the loader's ``samples`` / 2 batches,
    when fewer), each sample taking ``fetch_s`` to load and each step ``work_s`` of its
    own on a fake clock (the data's share of the step is the same on any machine); the
    dataset's fetch count after each step."""
    clock = _Clock()
    # the spec inline: a dataclass with steps=3 held in the loop's frame would read as the run's length
    rec = StepRecorder(ObserveSpec(out_dir=str(tmp_path), steps=3, warmup=1, profile_warmup=1, profile_active=1,
                                   **spec_kw), clock=clock)
    dataset = _Counted(fetch_s, samples, clock)
    fetched, steps = [], 0
    patch = timed_iteration(rec, clock=clock).install()
    try:
        for batch in DataLoader(dataset, batch_size=2):
            batch.sum()
            clock.now += work_s
            rec.backward_done()
            steps += 1
            fetched.append(dataset.fetched)
            if steps == 40:
                break
    except StopObserving:
        pass
    finally:
        patch.uninstall()
    return rec, fetched, steps


def test_the_replay_steps_fetch_nothing_and_are_timed(tmp_path):
    rec, fetched, steps = _run(tmp_path)
    # warm-up 1, recorded 3, profiled 2, then the replay steps; the run stops after them
    assert steps == 1 + 3 + 2 + REPLAY_STEPS - 1  # the last replay step's boundary raises StopObserving
    assert fetched[-1] == fetched[5] == 2 * 6  # after the profiled steps the dataset is never read again
    facts = rec.facts()
    assert facts.replay_step_ms == [0.0] * REPLAY_STEPS  # re-served from memory: no fetch, no work
    assert [s.index for s in facts.steps] == [1, 2, 3]  # replay steps are not recorded steps


def test_a_run_too_short_for_the_replay_turns_its_loop_no_more_than_its_batches(tmp_path):
    """One epoch of 16 batches, the script's whole run: re-served batches would be turns of
    its loop past its end (a OneCycleLR sized to it raised "Tried to step 17 times"). No
    replay then; the twin above, 5000 batches, replays."""
    rec, fetched, steps = _run(tmp_path, samples=32)
    assert rec.facts().replay_step_ms == [] and rec.facts().planned_steps == 16
    assert fetched[-1] == 2 * steps and steps <= 16  # every turn of the loop fetched its own batch


def test_twin_a_step_that_hardly_waits_for_data_is_not_replayed(tmp_path):
    rec, fetched, steps = _run(tmp_path, fetch_s=0.0, work_s=0.08)  # no time waiting for data
    assert steps == 1 + 3 + 2 - 1 and rec.facts().replay_step_ms == []


def test_twin_a_full_run_never_replays(tmp_path):
    rec, fetched, steps = _run(tmp_path, full=True)
    assert steps == 40 and fetched[-1] == 2 * 40  # every batch fetched: the script's training is its own
    assert rec.facts().replay_step_ms == []


@pytest.mark.slow
def test_on_a_loader_bound_script_no_data_finding_claims_more_than_the_replay_bound(tmp_path, capsys):
    out = tmp_path / "doctor"
    code = main(["doctor", "--steps", "5", "--warmup", "1", "--out", str(out), "--json", "--",
                 sys.executable, str(SCRIPTS / "doctor_data_bound.py")])
    assert code == 0, capsys.readouterr().err
    report = json.loads((out / "report.json").read_text())
    replay = report["facts"]["replay_step_ms"]
    assert len(replay) == REPLAY_STEPS
    bound = report["step_time_ms"]["median"] / sorted(replay)[len(replay) // 2]
    data = [f for f in report["findings"] if f["id"].startswith("data.")]
    assert data, "the loader-bound script has a data finding"
    for finding in data:
        assert finding["expected_speedup"] <= bound + 1e-9
        assert any(note.startswith("measured: fed batches already seen from memory") for note in finding["notes"])


def test_the_progress_line_names_the_replay_steps():
    from torchboost.observe.spec import stage_of

    spec = ObserveSpec(out_dir=".", steps=3, warmup=1, profile_warmup=1, profile_active=1)
    assert stage_of(7, spec) == {"stage": "replay", "step": 1, "of": REPLAY_STEPS}
    assert stage_of(9, ObserveSpec(out_dir=".", steps=3, warmup=1, full=True))["stage"] == "running"  # the twin


def test_only_the_training_loops_iterator_is_re_served_an_evaluation_pass_ends():
    from torchboost.observe.probes.replay import ReplayBatches

    replay, train, held_out = ReplayBatches(), object(), object()
    replay.keep("batch 1", train)
    replay.keep("batch 2", train)
    assert replay.start()
    assert replay.serves(train) and replay.serve() == "batch 1"  # the twin: the training loop is re-served
    assert not replay.serves(held_out)  # an evaluation loader asked meanwhile is fetched as usual ...
    assert replay.keep("held-out batch", held_out) == "held-out batch"
    assert not replay.serves(held_out) and replay.serves(train)  # ... and never becomes the one re-served
    assert replay.serve() == "batch 2"
