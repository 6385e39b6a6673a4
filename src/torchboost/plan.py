"""The plan: a configuration resolved once into what is applied from outside the training loop.

``torchboost run`` reads its configuration once (``torchboost.toml``, or ``[tool.torchboost]``
in ``pyproject.toml``) and tune builds each trial's once; either is resolved here, once,
into a :class:`Plan`: the whole configuration (what a :class:`torchboost.Booster` in the
script prepares with), the settings the no-code applier (:mod:`torchboost.nocode`) sets
from outside, and notes on what is left alone and why. The plan, whole, is what the
applier is given and what a trial's process reads (:mod:`torchboost.handover`: written
once, read once). Nothing resolves it again: the applier trusts it. A burst trial's
switches travel in it too (:class:`Bursts`): the one road from a candidate to a trial's
process.

What is applied from outside: the settings that change something ("keep" and the
plain-PyTorch defaults change nothing) and are concrete ("auto" is the Booster's to
resolve, since it sees the model), less those whose technique needs the Booster in the
loop (fp16's scaler, accumulation: each technique's descriptor says why).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Mapping

from torchboost.config import AUTO, BoostConfig, Overlay
from torchboost.techniques.registry import Technique, techniques

__all__ = ["Bursts", "Plan", "changed_settings", "nocode_settings"]


@dataclass(frozen=True)
class Bursts:
    """A burst trial's switches: after its recorded steps, the process alternates ``change``
    with the plan's own configuration in-process, in bursts of ``steps`` steps, plain then
    switched (:mod:`torchboost.observe.probes.quick`), then the script is stopped."""

    change: Overlay
    """The candidate's change (``precision.mode = "bf16"``) on top of the plan's configuration."""
    steps: int = 1
    """Steps in one burst."""
    pairs: int = 8
    """Pairs of bursts, plain then switched, at most."""
    min_gain: float | None = None
    """The least gain the search asks (0.03): the bursts end once their pairs decide the
    candidate faster, slower or of no gain by it (at least ``MIN_DECIDING_PAIRS`` of them);
    None: every pair runs."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "change", Overlay(self.change))
        object.__setattr__(self, "steps", max(1, self.steps))
        object.__setattr__(self, "pairs", max(1, self.pairs))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: the change by dotted name, the counts."""
        return {"change": self.change.to_dict(), "steps": self.steps, "pairs": self.pairs, "min_gain": self.min_gain}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Bursts":
        """The bursts :meth:`to_dict` wrote."""
        return cls(Overlay.from_dict(data["change"]), data["steps"], data["pairs"], data["min_gain"])


@dataclass(frozen=True)
class Plan:
    """A configuration, resolved for applying from outside the training loop."""

    config: BoostConfig
    """The whole configuration: what a Booster in the script uses, what tune writes."""
    apply: Overlay
    """What the no-code applier sets from outside (concrete changes that need no Booster)."""
    notes: tuple[str, ...] = ()
    """What is left alone, and why, in words."""
    bursts: Bursts | None = None
    """A burst trial's switches, alternated in-process after its recorded steps; None: none."""

    @classmethod
    def of(cls, config: BoostConfig, written: Collection[str] | None = None) -> "Plan":
        """Resolve ``config``; ``written``: the dotted keys the user's file sets, the only
        ones the notes on "auto" speak of (None: every key)."""
        wanted, notes = changed_settings(config, written)
        apply, refused = nocode_settings(wanted)
        return cls(config, apply, tuple(notes + refused))

    @classmethod
    def tuned(cls, settings: Overlay, base: BoostConfig | None = None, bursts: Bursts | None = None) -> "Plan":
        """The plan of tune's ``settings`` on the user's configuration ``base`` (None: plain
        PyTorch): what a trial's process applies, and what tune writes when they win;
        ``bursts``: a burst trial's switches on top of them."""
        plan = cls.of(settings.on(base if base is not None else BoostConfig.off()))
        return plan if bursts is None else cls(plan.config, plan.apply, plan.notes, bursts)

    @classmethod
    def applying(cls, settings: Mapping[str, Any]) -> "Plan":
        """The plan that applies exactly ``settings`` from outside, on plain PyTorch (a probe's,
        a test's); ValueError when one of them needs the Booster in the loop."""
        settings = Overlay(settings)
        _, refused = nocode_settings(settings)
        if refused:
            raise ValueError("; ".join(refused))
        return cls(settings.on(BoostConfig.off()), settings)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: the configuration's tables, the applied settings by dotted name, the
        notes, a burst trial's switches."""
        return {"config": self.config.to_dict(), "apply": self.apply.to_dict(), "notes": list(self.notes),
                "bursts": self.bursts.to_dict() if self.bursts is not None else None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Plan":
        """The plan :meth:`to_dict` wrote."""
        bursts = Bursts.from_dict(data["bursts"]) if data.get("bursts") is not None else None
        return cls(BoostConfig.from_dict(data["config"]), Overlay.from_dict(data["apply"]), tuple(data["notes"]),
                   bursts)


def nocode_settings(settings: Mapping[str, Any]) -> tuple[Overlay, list[str]]:
    """Split settings into what can be applied from outside and notes on the rest."""
    settings = Overlay(settings)
    applicable = settings
    notes: list[str] = []
    for technique in techniques():
        if technique.section is None:
            continue
        values = settings.section(technique.section)
        if not values:
            continue
        why = technique.nocode_refusal if technique.nocode is None else technique.nocode.refuse(values)
        if why is not None:
            applicable = applicable.without(technique.section)
            notes += [f"{technique.section.section}.{key} = {value!r} needs the Booster in the training loop "
                      f"({why}); not applied{_trainer_words(technique, key, value)}" for key, value in values.items()]
    return applicable, notes


def _trainer_words(technique: Technique, key: str, value: Any) -> str:
    # A Hugging Face Trainer script has a flag for some of what needs the Booster: the
    # technique's own spelling says which ("auto" has none: the Booster decides it).
    if technique.spell is None or technique.section is None or value == AUTO:
        return ""
    section = Overlay.of(technique.section, **{key: value}).on(BoostConfig.off()).section(technique.section)
    words = technique.spell(section).training_arguments()
    return f"; a Hugging Face Trainer takes {words}" if words else ""


def changed_settings(config: BoostConfig, written: Collection[str] | None = None) -> tuple[Overlay, list[str]]:
    """The settings of ``config`` that change something, and notes on its "auto"s.

    "keep" and the plain-PyTorch defaults change nothing; "auto" is left out too, since
    only the Booster resolves it (it sees the model). ``written``: the dotted keys the
    user's file sets; notes speak of those only (None: of every key).
    """
    changed = Overlay.between(BoostConfig.off(), config)
    notes = [f'{dotted} = "auto" is resolved by the Booster only; left as the script sets it'
             for dotted, value in changed.items() if value == "auto" and (written is None or dotted in written)]
    return Overlay({k: v for k, v in changed.items() if v not in ("auto", "keep")}), notes
