"""What a search decides, as plain data: each candidate's status, the waterfall, the outcome."""

from __future__ import annotations

import enum
import math
import statistics
from dataclasses import dataclass, field

from torchboost.config import Overlay
from torchboost.tune.trials.trial_result import TrialResult

__all__ = ["Decision", "Status", "TuneOutcome", "WaterfallStep", "compile_break_even", "paired_step_ms"]

Settings = Overlay


class Status(str, enum.Enum):
    """What became of a candidate: one vocabulary for the search, the journal and every
    report. A str: it compares equal to, and is written to JSON as, its value ("kept")."""

    KEPT = "kept"
    """Confirmed faster beyond the noise floor, and repaid over the planned run."""
    SLOWER = "slower"
    """Confirmed slower than the incumbent."""
    NOT_BEYOND_NOISE = "not_beyond_noise"
    """Faster, but by less than the noise floor or the least gain asked for."""
    NOT_REPAID = "not_repaid"
    """Faster per step, but its fixed cost (start-up, compile) is not repaid over the
    planned run; the decision gives the break-even."""
    SCREENED_OUT = "screened_out"
    """Another candidate of the same lever was faster in screening."""
    REPLACED = "replaced"
    """Kept, then replaced by a candidate of the same lever confirmed faster than it."""
    UNCONFIRMED = "unconfirmed"
    """The budget ran out (or the incumbent failed) before a confirming pair."""
    INCORRECT = "incorrect"
    """Loss parity failed."""
    FAILED = "failed"
    """The trial crashed or timed out."""
    SKIPPED = "skipped"
    """Not tried: the evidence said it could not pay (a compile the run cannot repay, bf16
    whose matmul the probe measured far slower than fp32), or a memory lever when nothing
    is over the memory limit."""
    OVER_MEMORY = "over_memory"
    """Its peak memory was over the memory limit (``--memory-limit``; by default 90% of the
    GPU's memory, or of the RAM on a CPU): however fast, it would not fit the run."""

    def __str__(self) -> str:
        return self.value


@dataclass
class Decision:
    """What happened to one candidate of one lever, with the words a report needs."""

    lever: str
    settings: Settings
    """The changes this candidate made on top of the incumbent."""
    status: Status
    reason: str
    ratio: float | None = None
    """Median step time of the candidate / incumbent (below 1 is faster)."""
    ratios: list[float] = field(default_factory=list)
    ms_per_step: float | None = None
    break_even_steps: float | None = None
    title: str = ""
    """The lever's title: "torch.compile"."""
    subject: str = ""
    """What a reader calls this candidate: "bf16", or the lever's title."""
    reduced_precision: bool = False
    """The lever lowers numeric precision (its parity is REDUCED)."""
    amortised: bool = False
    """The lever is compile: its compile time must be repaid (break-even applies)."""
    peak_memory_bytes: int | None = None
    """The highest peak memory its trials measured, bytes (None: not measured)."""
    memory_lever: bool = False
    """The lever trades time for memory: tried only while the peak is over the limit."""
    compile_cold_s: float | None = None
    """Compile seconds of its first run (an empty compile cache), for a compile lever."""
    compile_warm_s: float | None = None
    """Compile seconds of every later run (the cache warm): what the user pays each run."""
    in_bursts: bool = False
    """Decided in alternating bursts inside one run: ``ratios`` are the bursts' pairs."""

    def __post_init__(self) -> None:
        self.status = Status(self.status)
        self.peak_memory_bytes = self.peak_memory_bytes or None  # a trial's 0 means not measured


@dataclass
class WaterfallStep:
    """One bar of the waterfall: the configuration after keeping one more lever."""

    label: str
    settings: Settings
    ms_per_step: float
    """The baseline's time per step divided by ``speedup``."""
    speedup: float
    """Over the baseline: the product of the kept levers' confirmed pair ratios. Each ratio
    compares runs made next to each other, so slow drift of the machine over the whole
    search does not leak into it, as it would into a ratio of far-apart medians."""
    spread: float
    """Max minus min of the pair ratios that confirmed it (0 for the baseline)."""
    peak_memory_bytes: int | None = None
    """The highest peak memory this configuration's trials measured, bytes (None: not measured)."""


@dataclass
class TuneOutcome:
    """The result of a search: the winning settings and the story of how they won."""

    baseline: TrialResult
    settings: Settings
    waterfall: list[WaterfallStep]
    decisions: list[Decision]
    trials_run: int
    elapsed_s: float
    stopped_by_budget: bool = False
    error: str | None = None
    noise: float = 0.0
    """The noise floor: the median departure from 1 of the A/A ratios (each pair's run of
    the incumbent against the one before it); a change is kept only when it gains more."""
    aa_ratios: list[float] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """What makes the figures less trustworthy (a busy machine, a wide noise floor)."""
    memory_limit_bytes: int | None = None
    """The peak memory a kept configuration had to stay under, bytes (None: no limit known)."""
    spent_s: dict[str, float] = field(default_factory=dict)
    """Seconds the search's trials took by kind: "bursts" (burst trials) and "trials" (the others)."""
    burst_trials: int = 0
    """How many of ``trials_run`` were burst trials."""

    @property
    def speedup(self) -> float:
        """Baseline time per step over the final configuration's."""
        return self.waterfall[-1].speedup if self.waterfall else 1.0


def compile_break_even(compile_s: float, eager_ms: float, compiled_ms: float) -> float:
    """Steps after which compiling has paid for itself; inf when compiled is not faster."""
    saving_ms = eager_ms - compiled_ms
    return math.inf if saving_ms <= 0 else 1e3 * compile_s / saving_ms


def paired_step_ms(incumbent_ms: list[float], ratios: list[float]) -> float:
    """The candidate's step time as the pairs measured it: the incumbent's median step
    times the median pair ratio. Unpaired medians of the two sides disagree with the
    ratio when the machine drifts between pairs (a candidate 4% faster in every pair can
    have a median step 9 ms slower than the incumbent's median)."""
    return statistics.median(incumbent_ms) * statistics.median(ratios)
