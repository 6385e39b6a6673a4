"""Diagnosis: what bounds a training step, from observed Facts, without running anything.

Public names::

    Facts, StepRecord, ...   what the observer saw (torchboost.evidence.observed)
    diagnose(facts)          ranked list of Finding
    summarize(facts)         Summary: step-time statistics and breakdown
    RULES                    finding id -> rule function
"""

from torchboost.evidence.observed import Facts, LoaderFacts, ModelFacts, OptimizerFacts, ProfileFacts, StepRecord
from torchboost.evidence.findings import Finding
from torchboost.diagnose.rules import RULES, diagnose, thresholds
from torchboost.evidence.steps import Summary, summarize

__all__ = [
    "Facts",
    "Finding",
    "LoaderFacts",
    "ModelFacts",
    "OptimizerFacts",
    "ProfileFacts",
    "RULES",
    "StepRecord",
    "Summary",
    "diagnose",
    "summarize",
    "thresholds",
]
