"""The end-to-end check: the tuned configuration against the baseline, as the user runs it.

The room's parts::

    end_to_end    what the check measured (pairs of whole runs, projected when capped),
                  its interval and verdict: plain arithmetic
    check_plan    planning the pairs and pricing the time kept for them
    check         running the pairs (through ``tune.trials``' journal)
    versus        two ways of running compared the same way (``torchboost compare``)

It imports ``tune.trials`` and the search's outcome data (``tune.search.decision``); the
search never imports it.
"""

from torchboost.tune.verify.check import verify
from torchboost.tune.verify.check_plan import VerifyPlan, plan_verification, reserve_s, shortest_pair_s, shortest_run_s
from torchboost.tune.verify.end_to_end import EndToEnd, end_to_end_verdict

__all__ = ["EndToEnd", "VerifyPlan", "end_to_end_verdict", "plan_verification", "reserve_s", "shortest_pair_s", "shortest_run_s",
           "verify"]
