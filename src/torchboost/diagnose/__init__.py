"""Diagnosis: what bounds a training step, from observed Facts, without running anything.

Public names::

    Facts, StepRecord, ...   what the observer saw (torchboost.diagnose.facts)
    diagnose(facts)          ranked list of Finding
    summarize(facts)         Summary: step-time statistics and breakdown
    RULES                    finding id -> rule function
"""

from torchboost.diagnose.facts import (
    Facts,
    LoaderFacts,
    ModelFacts,
    OptimizerFacts,
    PrecisionFacts,
    ProfileFacts,
    StepRecord,
)
from torchboost.diagnose.finding import Finding
from torchboost.diagnose.rules import RULES, diagnose, thresholds
from torchboost.diagnose.summary import Summary, summarize

__all__ = [
    "Facts",
    "Finding",
    "LoaderFacts",
    "ModelFacts",
    "OptimizerFacts",
    "PrecisionFacts",
    "ProfileFacts",
    "RULES",
    "StepRecord",
    "Summary",
    "diagnose",
    "summarize",
    "thresholds",
]
