"""The search: pure, its measurements injected (``measure(settings, repeat) -> TrialResult``).

The room's parts, each importing only those listed before it (and ``tune.trials`` for the
data a trial gives back)::

    decision, search_options, parity            what is decided, the knobs, loss parity
    levers, probe_order                          the levers, in the doctor's order
    pairs, noise, bursts, busy                   measurements: pairs of runs, the A/A floor,
                                                 bursts in one run, too busy to tell
    repaid, memory_limit, interaction, coverage  fixed costs, the memory gate, levers that
                                                 pay together, what a root change covered
    search_state -> screening -> confirm         the state and its books, screening the
                                                 candidates, confirming one and deciding it
    step_by_step                                 the flow: the three composed, lever by lever

:func:`run_search` (:mod:`.step_by_step`) is the room's entry.
"""

from torchboost.tune.search.decision import Decision, Status, TuneOutcome, WaterfallStep, compile_break_even
from torchboost.tune.search.search_options import SearchOptions
from torchboost.tune.search.step_by_step import INTERACTION, INTERACTION_TITLE, run_search

__all__ = ["Decision", "SearchOptions", "Status", "TuneOutcome", "WaterfallStep", "run_search", "compile_break_even",
           "INTERACTION", "INTERACTION_TITLE"]
