"""The search confirms a winner before it explores its siblings, screens only siblings that
can still win, and keeps the end-to-end check's time: on a fake clock, in milliseconds."""

from __future__ import annotations

import itertools

import pytest

from test_search import BASE_LOSSES, CPU2

from torchboost.techniques.loader import LoaderTuning
from torchboost.tune.search.levers import default_levers
from torchboost.tune.search import SearchOptions, run_search
from torchboost.tune.trials.trial_result import TrialResult

# The demo's shape on 2 cores: 84 ms a step, 70 of them waiting for a batch the training
# process loads itself; 14 ms with no loader work.
LOADER_BOUND = CPU2.with_own(LoaderTuning(batch_load_ms=70.0, dataless_step_ms=14.0, dataless_threads=2))


class HostScript:
    """ms per step by (workers, threads, file_system hand-over); each trial takes ``trial_s``
    on the fake clock; a little deterministic noise per trial."""

    def __init__(self, ms: dict[tuple[int, int, bool], float], trial_s: float = 10.0):
        self.ms, self.trial_s, self.now = ms, trial_s, 0.0
        self.calls: list[tuple[dict, int, float, float]] = []
        """(settings, repeat, start, end) of each trial."""
        self._noise = itertools.cycle([1.0, 1.005, 0.995])

    def clock(self) -> float:
        return self.now

    def __call__(self, settings, repeat, **_):
        key = (settings.get("loader.num_workers", 0), settings.get("cpu.threads", 2),
               settings.get("loader.sharing_strategy") == "file_system")
        ms = self.ms.get(key, 100.0) * next(self._noise)
        start, self.now = self.now, self.now + self.trial_s
        self.calls.append((dict(settings), repeat, start, self.now))
        return TrialResult(settings=dict(settings), repeat=repeat, step_ms=[ms] * 5, losses=list(BASE_LOSSES),
                           samples_per_step=32, wall_s=self.trial_s, fixed_s=self.trial_s / 2)


def _host_levers():
    return [lever for lever in default_levers() if lever.id == "host"]


def _first_pair_and_siblings(script: HostScript) -> tuple[int, list[int]]:
    """The index of the first re-run of the baseline (a pair's A) and of every host screening."""
    first_pair = next(i for i, (s, repeat, _, _) in enumerate(script.calls) if not s and repeat > 0)
    screenings = [i for i, (s, repeat, _, _) in enumerate(script.calls) if s and repeat == 0]
    return first_pair, screenings


@pytest.mark.parametrize("beyond_noise", [True, False])
def test_a_winner_in_screening_is_confirmed_before_its_siblings(beyond_noise):
    """One intra-op thread (a busy machine) screens first, at 0.74 of the baseline: it is
    confirmed at once, and kept within a budget too short to screen all nine candidates
    first. Twin: a least gain of 30% puts it within the floor in screening, so every
    sibling is screened before any pair (the order before this change), and the budget
    ends with it unconfirmed."""
    script = HostScript({(0, 2, False): 84.0, (0, 1, False): 62.0})
    options = SearchOptions(budget_s=100.0, min_gain=0.03 if beyond_noise else 0.3)
    outcome = run_search(_host_levers(), CPU2, script, options, clock=script.clock)
    host = [d for d in outcome.decisions if d.lever == "host" and d.status not in ("screened_out", "skipped")]
    if beyond_noise:
        first_pair, screenings = _first_pair_and_siblings(script)
        assert screenings[0] < first_pair < screenings[1]  # confirmed before the next sibling
        assert host[0].status == "kept" and host[0].settings == {"cpu.threads": 1}
        assert outcome.speedup == pytest.approx(84 / 62, rel=0.03)
    else:
        assert len([s for s, repeat, _, _ in script.calls if s]) == 9  # every sibling screened, no pair
        assert host[-1].status == "unconfirmed" and outcome.speedup == 1.0


def test_the_first_candidate_screened_is_the_one_the_doctor_bounds_lowest():
    """With a batch taking 70 ms to load, 2 workers (35 ms at best) are screened before
    1 worker or fewer threads alone (70 ms at best). Twin: without the doctor's figures the
    lever's own order screens fewer threads alone first."""
    for context, first in ((LOADER_BOUND, 2), (CPU2, 0)):
        script = HostScript({(0, 2, False): 84.0, (2, 1, True): 62.0})
        run_search(_host_levers(), context, script, SearchOptions(budget_s=1000.0), clock=script.clock)
        assert script.calls[1][0].get("loader.num_workers", 0) == first


def test_siblings_that_cannot_beat_the_kept_one_are_not_screened():
    """Kept at 62 ms: 1 worker (at best the 70 ms load) and fewer threads alone (70 ms) cannot
    beat it, and are skipped with that bound; 2-worker siblings (35 ms at best) are screened.
    Twin: without the doctor's load time every candidate is screened."""
    ms = {(0, 2, False): 84.0, (2, 1, True): 62.0, (2, 1, False): 63.0, (2, 2, True): 88.0, (2, 2, False): 90.0,
          (1, 1, True): 95.0, (1, 1, False): 95.0, (1, 2, True): 127.0, (1, 2, False): 127.0, (0, 1, False): 90.0}
    bounded = HostScript(dict(ms))
    outcome = run_search(_host_levers(), LOADER_BOUND, bounded, SearchOptions(budget_s=10_000.0), clock=bounded.clock)
    skipped = [d for d in outcome.decisions if d.status == "skipped"]
    assert {d.settings.get("loader.num_workers", 0) for d in skipped} == {0, 1} and len(skipped) == 5
    assert all("cannot step in less than 70.0 ms" in d.reason for d in skipped)
    screened = [s for s, repeat, _, _ in bounded.calls if s and repeat == 0]
    assert len(screened) == 4 and all(s["loader.num_workers"] == 2 for s in screened)
    unbounded = HostScript(dict(ms))
    outcome = run_search(_host_levers(), CPU2, unbounded, SearchOptions(budget_s=10_000.0), clock=unbounded.clock)
    assert not [d for d in outcome.decisions if d.status == "skipped"]
    assert len([s for s, repeat, _, _ in unbounded.calls if s and repeat == 0]) == 9


def test_a_sibling_confirmed_faster_replaces_the_kept_one():
    """torch's own hand-over is screened first with 2 workers and kept at 62 ms; file_system,
    screened next at 50 ms, is confirmed faster than it and replaces it: one bar in the
    waterfall, from the baseline, and the earlier decision says it was replaced."""
    script = HostScript({(0, 2, False): 84.0, (2, 1, False): 62.0, (2, 1, True): 50.0, (2, 2, True): 88.0,
                         (2, 2, False): 88.0})
    outcome = run_search(_host_levers(), LOADER_BOUND, script, SearchOptions(budget_s=10_000.0), clock=script.clock)
    statuses = [(d.status, d.settings.get("loader.sharing_strategy")) for d in outcome.decisions
                if d.status in ("kept", "replaced")]
    assert statuses == [("replaced", None), ("kept", "file_system")]
    assert outcome.settings["loader.sharing_strategy"] == "file_system" and outcome.settings["loader.num_workers"] == 2
    assert [w.label for w in outcome.waterfall] == ["baseline", "+ loader workers + CPU threads"]
    assert outcome.speedup == pytest.approx(84 / 50, rel=0.03)


@pytest.mark.parametrize("reserved", [True, False])
def test_the_end_to_end_checks_reserve_is_never_spent_on_trials(reserved):
    """A deadline of 200 s with 80 s kept for the check: no trial runs past 120 s, though
    the budget (190 s) would let trials start until then. Twin: nothing kept back, trials
    run into those 80 s."""
    script = HostScript({(0, 2, False): 84.0, (2, 1, True): 62.0, (2, 1, False): 63.0}, trial_s=15.0)
    options = SearchOptions(budget_s=190.0, deadline_s=200.0)
    run_search(_host_levers(), CPU2, script, options, clock=script.clock,
               reserve=(lambda baseline, tuned_ms: 80.0) if reserved else None)
    last_end = max(end for _, _, _, end in script.calls)
    assert (last_end <= 120.0) is reserved
