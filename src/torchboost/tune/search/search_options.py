"""The search's knobs: budget, least gain, pairs, compile amortisation, noise, early stop."""

from __future__ import annotations

from dataclasses import dataclass

from torchboost.env import BUSY_PCT

__all__ = ["SearchOptions"]


@dataclass(frozen=True)
class SearchOptions:
    """Knobs of the search; gains are fractions (0.03 = 3% faster)."""

    budget_s: float = 600.0
    """Stop starting new trials after this many seconds; keep the best so far."""
    deadline_s: float | None = None
    """Seconds from the search's start by which the whole tune ends, the end-to-end check
    included: the check's reserve (``run_search``'s ``reserve``) is kept before it, and no
    trial that would run into it starts. None: only ``budget_s`` bounds the search."""
    min_gain: float = 0.03
    """A lever is kept only when it makes the step at least this much faster."""
    max_repeats: int = 3
    """Most fresh A/B pairs measured to confirm one lever (at least one always is)."""
    clear_pairs: int = 2
    """Stop confirming once this many pairs in a row agree on the verdict."""
    run_steps: int | None = None
    """Planned length of the real run in steps, for amortising compile time."""
    compile_min_s: float = 10.0
    """The least a first compile costs (seconds); on a 2-core CPU even a tiny model's
    first compile takes tens of seconds."""
    compile_max_gain: float = 0.5
    """The largest share of a step compile is assumed to save, for the pre-check."""
    interaction_margin: float = 0.2
    """A coupled lever's runner-up within this fraction of the kept choice's screening
    time (one trial each: noisy) is tried again with the exact levers that gained too
    little to be kept on their own."""
    interaction_hosts: int = 1
    """At most this many runners-up per coupled lever in the interaction pass."""
    noise_repeats: int = 3
    """A/A ratios (each pair's A against the A before it) the first confirmation measures
    at least, up to ``max_repeats`` pairs; 0 trusts ``min_gain`` until pairs say more."""
    aa_first: bool = False
    """Measure the ``noise_repeats`` A/A runs before any candidate, as tune did before the
    floor came from pairs (on slow steps they can spend the budget before the top candidate):
    kept for the benchmark that compares the two orders."""
    noisy: float = 0.15
    """A noise floor above this (15%) makes every verdict unreliable, and the outcome says so."""
    early_stop: float = 2.0
    """A screened candidate whose first steps are this many times slower than the incumbent's
    stops early and is recorded as slower (when the measure can stop a trial)."""
    trial_steps: int = 30
    """Measured steps of an ordinary trial: a burst trial times about as many."""
    busy_pct: float = BUSY_PCT
    """Other processes' CPU load (percent of the machine) above the baseline's by more than
    this during a pair: the pair is measured again, and the decision says so if it stays."""
    bursts: bool = False
    """The measure runs burst trials (its ``bursts`` keyword: an in-process switch alternated
    inside one run, :mod:`torchboost.tune.search.bursts`), as tune's trials do; False: every
    candidate is confirmed in pairs of runs."""
