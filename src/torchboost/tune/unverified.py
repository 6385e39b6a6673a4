"""What the search measured but the end-to-end check could not confirm: kept apart, never lost.

When the check cannot finish (the budget holds no pair of runs, or fewer pairs than a claim
rests on, and those were not slower), or its pairs were faster only by as much as the
machine's load moving between the baseline and the pairs could account for, the measured
configuration is written to ``torchboost.unverified.toml`` beside the user's
``torchboost.toml``, which stays as it was.
The verdict says what was measured and how ("3.86x a step: median ratio 0.259 ± 0.017 over 6
pairs of alternating bursts in one run"), and names the one command that verifies it end to
end, ``torchboost compare``, with the time it is expected to take. ``torchboost run --config
torchboost.unverified.toml`` applies it as it would the other file.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Sequence

from torchboost._io import atomic_write_bytes
from torchboost.config import BoostConfig
from torchboost.tune.search.decision import Status, TuneOutcome
from torchboost.tune.trials.check_runs import CLAIM_PAIRS, EndToEnd, Unverified
from torchboost.tune.trials.trial_result import describe_settings

__all__ = ["UNVERIFIED_NAME", "Unverified", "as_typed", "compare_command", "measured_words", "unverified_path",
           "write_unverified", "check_unfinished"]

UNVERIFIED_NAME = "torchboost.unverified.toml"
"""The file the measured configuration goes to when the end-to-end check could not confirm it."""

COMPARE_PAIRS = 4
"""Pairs of whole runs the printed ``torchboost compare`` runs: the fewest a claim rests on."""
COMPARE_LOSS_STEPS = 30
"""Observed steps of each side whose losses ``torchboost compare`` judges (its default)."""
COMPARE_DEFAULT_BUDGET_S = 1800.0
"""``torchboost compare``'s own --budget: the printed command raises it where the runs need more."""


def check_unfinished(e2e: EndToEnd | None, min_gain: float, asked_pairs: int = CLAIM_PAIRS) -> bool:
    """The end-to-end check could not decide: for lack of time, it did not run (the budget
    held no pair), or ran fewer pairs than a claim rests on (or than ``asked_pairs``, the
    --verify-pairs asked, when fewer), none of them, or ones whose median was faster by the
    least gain; or its pairs were faster, but the machine's load moved between the baseline
    and the pairs by more than their interval allows (:meth:`EndToEnd.load_moved`). False
    once it verified, ran what was asked, failed, or measured the tuned side no faster."""
    if e2e is None:
        return True
    if e2e.error is None and e2e.load_moved(min_gain):
        return True
    if e2e.error is not None or e2e.pairs >= min(CLAIM_PAIRS, asked_pairs):
        return False
    return e2e.pairs == 0 or (e2e.speedup is not None and 1.0 / e2e.speedup < 1.0 - min_gain)


def measured_words(outcome: TuneOutcome) -> tuple[str, ...]:
    """Each kept change and its measure ("cpu.threads=1: 3.86x a step, median ratio 0.259 ±
    0.017 over 6 pairs of alternating bursts in one run")."""
    return tuple(f"{describe_settings(d.settings)}: {1.0 / d.ratio:.2f}x a step, {d.reason}"
                 for d in outcome.decisions if d.status is Status.KEPT and d.ratio)


def unverified_path(config_path: Path) -> Path:
    """``torchboost.unverified.toml`` in the folder of the user's configuration file."""
    return Path(config_path).with_name(UNVERIFIED_NAME)


def as_typed(command: Sequence[str]) -> list[str]:
    """The user's command as they typed it (``python``, not this interpreter's path)."""
    return ["python" if w == sys.executable else w for w in command[:1]] + list(command[1:])


def compare_command(command: Sequence[str], config_path: Path, unverified: Path, *,
                    expected_s: float | None) -> tuple[str, ...]:
    """``torchboost compare --config torchboost.toml --config torchboost.unverified.toml --
    python train.py ...`` (``none`` for the first where the user has no file), with a
    --budget large enough for its runs when its own default is not."""
    baseline = str(config_path) if Path(config_path).is_file() else "none"
    words = ["torchboost", "compare", "--config", baseline, "--config", str(unverified)]
    if expected_s is not None and expected_s * 1.25 > COMPARE_DEFAULT_BUDGET_S:
        words += ["--budget", str(math.ceil(expected_s * 1.25 / 60) * 60)]
    return tuple([*words, "--", *as_typed(command)])


def compare_expected_s(outcome: TuneOutcome, run_steps: int | None) -> float | None:
    """Seconds ``torchboost compare`` takes: :data:`COMPARE_PAIRS` pairs of whole runs at the
    baseline's and the tuned configuration's measured paces, start-up included, and each
    side's loss run; None when the planned run's length is unknown."""
    if run_steps is None or not outcome.waterfall:
        return None
    fixed = outcome.baseline.fixed_s
    paces = (outcome.baseline.ms_per_step, outcome.waterfall[-1].ms_per_step)
    whole = sum(fixed + run_steps * ms / 1e3 for ms in paces)
    losses = sum(fixed + min(run_steps, COMPARE_LOSS_STEPS) * ms / 1e3 for ms in paces)
    return COMPARE_PAIRS * whole + losses


def write_unverified(command: Sequence[str], config_path: Path, config: BoostConfig, header: str,
                     outcome: TuneOutcome, run_steps: int | None,
                     tune_again: tuple[tuple[str, ...], float] | None = None) -> Unverified:
    """Write ``config`` with ``header`` to :func:`unverified_path` and say how to verify it
    (``tune_again``: the ``tune --resume`` command that finishes the check, and the most
    seconds it takes)."""
    path = unverified_path(config_path)
    atomic_write_bytes(path, config.to_toml_string(header=header).encode("utf-8"))
    expected = compare_expected_s(outcome, run_steps)
    again, again_s = tune_again if tune_again is not None else ((), None)
    return Unverified(path=path, measured=measured_words(outcome),
                      command=compare_command(command, config_path, path, expected_s=expected), expected_s=expected,
                      tune_again=again, tune_again_s=again_s)
