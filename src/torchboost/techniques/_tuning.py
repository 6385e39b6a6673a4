"""What the tuner knows of a technique: its levers, how their losses are judged, the context.

A :class:`Lever` is one change the tuner may keep or revert as a whole, declared with its
technique (:class:`~torchboost.techniques.registry.Technique`); :class:`Parity` is how its
candidate's losses must agree with the configuration it is held to; :class:`TuneContext`
is what the tuner knows of the machine and script before it starts.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, TypeVar

from torchboost.config import Overlay
from torchboost.evidence.observed import seen_in

T = TypeVar("T")

__all__ = ["Lever", "Parity", "TuneContext"]

class Parity(str, enum.Enum):
    """How a candidate's losses must agree with the configuration it is held to."""

    EXACT = "exact"
    """fp32 maths unchanged: the first losses match closely."""
    REDUCED = "reduced"
    """Lower precision: the last losses within a relative tolerance."""
    STATISTICAL = "statistical"
    """Other random draws (loader workers seed their own augmentations): the same trend."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class TuneContext:
    """What the tuner knows before it starts: machine and script facts, plain data.

    The generic facts are read by the tuner itself; each technique's own tuning facts
    (:attr:`tuning`) come from the doctor's facts through that technique's
    :attr:`Technique.tune_context` hook, and its levers read them with :meth:`own`.
    """

    device: str = "cpu"
    cpu_cores: int = 1
    has_loader: bool = True
    has_optimizer: bool = True
    uses_booster: bool = False
    """The script calls Booster.prepare: every lever applies through it (fp16 too)."""
    memory_limit_bytes: int | None = None
    """The peak memory a kept configuration must stay under, bytes (``--memory-limit``; by
    default 90% of the GPU's memory, or of the RAM on a CPU); None: no limit known."""
    peak_memory_bytes: int = 0
    """The baseline's peak memory as the doctor saw it, bytes (the CUDA allocator's peak on
    a GPU, the training process's peak RSS otherwise); 0: not measured."""
    step_ms: float | None = None
    """The doctor's mean step, ms (None: no step observed)."""
    planned_steps: int | None = None
    """The planned run's length in steps (``--run-steps``, else the doctor's estimate); None:
    not known."""
    budget_s: float | None = None
    """Seconds the search may spend on trials (what ``--budget`` leaves after the
    diagnosis); None: not known."""
    techniques: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Each technique's own facts as the doctor saw them (``Facts.techniques``)."""
    random_ops: tuple[str, ...] = ()
    """The step's ops that draw random numbers, as the doctor saw them (``Facts.random_ops``)."""
    measured: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """The doctor's quick probes by finding id, each a :class:`~torchboost.evidence.findings.Measured`:
    the fix timed against plain steps, interleaved, in the script's process (``Facts.quick_probes``)."""
    tuning: tuple[Any, ...] = ()
    """Each technique's own tuning facts, one object of its own frozen dataclass each (what
    its ``tune_context`` hook read from the doctor's facts), read with :meth:`own`."""

    def __post_init__(self) -> None:
        kinds = [type(facts).__name__ for facts in self.tuning]
        twice = sorted({kind for kind in kinds if kinds.count(kind) > 1})
        if twice:
            raise ValueError(f"TuneContext.tuning holds more than one of {twice}: one object per technique")

    def seen(self, kind: type[T]) -> T:
        """A technique's facts (``kind`` names its technique); its defaults when not seen."""
        return seen_in(self.techniques, kind)

    def own(self, kind: type[T]) -> T:
        """A technique's tuning facts of ``kind`` (see :attr:`tuning`); its defaults when
        its hook gave none (no doctor's facts, or a context built by hand)."""
        for facts in self.tuning:
            if type(facts) is kind:
                return facts
        return kind()

    def with_own(self, *facts: Any) -> TuneContext:
        """A copy with ``facts`` in place of the tuning facts of their kinds (added where absent)."""
        kinds = {type(f) for f in facts}
        return dataclasses.replace(self, tuning=(*(f for f in self.tuning if type(f) not in kinds), *facts))


@dataclass(frozen=True)
class Lever:
    """One change the tuner may keep or revert as a whole."""

    id: str
    title: str
    parity: Parity
    proposer: Callable[[Overlay, TuneContext], list[Overlay]]
    """Changes to try on top of the incumbent settings (an empty list: not applicable)."""
    finding_ids: tuple[str, ...] = field(default=())
    """Doctor findings whose expected speedup ranks this lever."""
    priority: int = 100
    """Place in the default order, lowest first, when no finding ranks the levers."""
    fixed_cost: str = ""
    """What the lever costs once, up front, in words ("compile"), measured on the first run
    and on a later one (its cache warm): amortised over the planned run before it is kept,
    and the lever is skipped when the run is too short to repay its least. "": none."""
    coupled_with: tuple[str, ...] = ()
    """Other techniques whose knobs its candidates move together with its own (the loader's
    workers with the cpu's threads): its runners-up are tried again with the levers not kept
    alone, in the interaction pass."""
    fallback_parity: Parity | None = None
    """A looser check when ``parity`` fails: loader workers seed their own random
    augmentations, so the same samples come out with other random draws."""
    draws_own_random: bool = False
    """Its candidates run the step's random ops in code of their own (compiled kernels), so
    the same seed draws other numbers (other dropout masks): where the step draws any
    (``TuneContext.random_ops``), a failed ``parity`` check falls back to the loss trend."""
    subject: Callable[[Overlay], str] | None = None
    """What a reader calls a candidate ("bf16"); None: the lever's title."""
    hopeless: Callable[[TuneContext], str | None] | None = None
    """Evidence, in words, that the lever cannot pay here: it is then skipped, untried."""
    probed_by: str = ""
    """The finding whose quick probe times this lever's own change (bf16 autocast): it orders
    the search, and one measured slower than plain skips the lever. "": none does."""
    retry_after: tuple[str, ...] = ()
    """Levers on top of which this one, correct but not kept alone, is tried again once they
    are kept: bf16 after compile (fusion in bf16 can pay where it does not in fp32)."""
    for_memory: bool = False
    """A memory lever: it trades time for memory; tried only when the incumbent's peak is
    over the memory limit, and kept when it brings the peak under the limit, whatever its
    time cost (which is shown)."""
    switchable: Callable[[Overlay], bool] | None = None
    """Which of its candidates a quick probe's switch makes in the running script (a burst
    trial can alternate it); None: every candidate when ``probed_by`` is set, else none."""
    floor: Callable[[Overlay, TuneContext], tuple[float, str] | None] | None = None
    """The least step time a candidate change could reach by the doctor's measurements, ms,
    and that bound in words ("loading a batch took 22.0 ms in the training process: 11.0 ms
    over 2 workers"); None for a change it cannot bound. The search screens the
    candidates lowest bound first, and one whose bound cannot beat the configuration kept
    so far is not screened."""

    @property
    def in_process(self) -> bool:
        """Some candidate of it is an in-process switch with no fixed cost: decided in
        alternating bursts inside one run, not in a run of its own per candidate."""
        return bool(self.probed_by or self.switchable) and not self.fixed_cost and not self.for_memory

    def switches(self, change: Overlay) -> bool:
        """``change`` is an in-process switch (see :attr:`switchable`)."""
        return self.switchable(change) if self.switchable is not None else bool(self.probed_by)

    def propose(self, incumbent: Mapping[str, Any], ctx: TuneContext) -> list[Overlay]:
        """The candidate changes on top of ``incumbent`` (the settings kept so far)."""
        return [Overlay(change) for change in self.proposer(Overlay(incumbent), ctx)]
