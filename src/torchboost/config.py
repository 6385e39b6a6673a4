"""BoostConfig: what torchboost may change, one frozen dataclass per technique.

The configuration lives in one TOML file, ``torchboost.toml``::

    [precision]
    mode = "auto"            # auto | fp32 | tf32 | bf16 | fp16
    [compile]
    mode = "off"             # off | default | reduce-overhead | max-autotune
    scope = "model"          # model | regional
    [loader]
    num_workers = "auto"     # auto | keep | int >= 0
    pin_memory = "auto"      # auto | keep | true | false
    persistent_workers = "auto"
    prefetch_factor = "auto" # auto | keep | int >= 1
    sharing_strategy = "auto"  # auto | keep | file_descriptor | file_system
    [optimizer]
    implementation = "auto"  # auto | default | foreach | fused
    [memory]
    channels_last = "auto"   # auto | true | false
    [cpu]
    threads = "auto"         # auto | keep | int >= 1
    [accumulation]
    steps = 1                # micro-batches per optimizer step, or:
    effective_batch_size = "off"  # off | samples per optimizer step (all processes)
    micro_batch_size = "auto"     # auto | batch | int >= 1  (Booster.train_step)

``"auto"`` is resolved at ``Booster.prepare`` time from the hardware (see
:mod:`torchboost.resolve`); ``"keep"`` leaves the user's own setting untouched.
Every value is validated when the dataclass is built, and a bad value raises
:class:`ConfigError` naming the field and what it accepts.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping, Union

import tomli_w

from torchboost._io import atomic_write_bytes

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = [
    "AccumulationConfig",
    "BoostConfig",
    "CompileConfig",
    "ConfigError",
    "CpuConfig",
    "LoaderConfig",
    "MemoryConfig",
    "OptimizerConfig",
    "PrecisionConfig",
    "CONFIG_FILENAME",
]

CONFIG_FILENAME = "torchboost.toml"
"""The file ``Booster()`` reads from the working directory when no config is given."""

AUTO = "auto"
KEEP = "keep"

IntOrWord = Union[int, str]
BoolOrWord = Union[bool, str]


class ConfigError(ValueError):
    """A configuration value or key is invalid; the message names the field."""


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"{name}: expected one of {', '.join(choices)}; got {_fmt(value)}")


def _check_int_or_word(name: str, value: Any, minimum: int, words: tuple[str, ...]) -> None:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if is_int and value >= minimum:
        return
    if isinstance(value, str) and value in words:
        return
    allowed = " | ".join([*words, f"an integer >= {minimum}"])
    raise ConfigError(f"{name}: expected {allowed}; got {_fmt(value)}")


def _check_bool_or_word(name: str, value: Any, words: tuple[str, ...]) -> None:
    if isinstance(value, bool) or (isinstance(value, str) and value in words):
        return
    allowed = " | ".join([*words, "true", "false"])
    raise ConfigError(f"{name}: expected {allowed}; got {_fmt(value)}")


@dataclass(frozen=True, kw_only=True)
class PrecisionConfig:
    """Numeric precision of forward and backward."""

    section: ClassVar[str] = "precision"
    MODES: ClassVar[tuple[str, ...]] = ("auto", "fp32", "tf32", "bf16", "fp16")

    mode: str = AUTO
    """auto | fp32 (no change) | tf32 (matmul precision "high") | bf16 autocast |
    fp16 autocast with a GradScaler."""

    def __post_init__(self) -> None:
        _check_choice("precision.mode", self.mode, self.MODES)


@dataclass(frozen=True, kw_only=True)
class CompileConfig:
    """torch.compile of the model."""

    section: ClassVar[str] = "compile"
    MODES: ClassVar[tuple[str, ...]] = ("off", "default", "reduce-overhead", "max-autotune")
    SCOPES: ClassVar[tuple[str, ...]] = ("model", "regional")

    mode: str = "off"
    """off | default | reduce-overhead | max-autotune (torch.compile's ``mode``)."""
    scope: str = "model"
    """model (compile the whole model) | regional (compile each block of a repeated
    ModuleList/Sequential; shorter compile, falls back to the whole model)."""

    def __post_init__(self) -> None:
        _check_choice("compile.mode", self.mode, self.MODES)
        _check_choice("compile.scope", self.scope, self.SCOPES)


@dataclass(frozen=True, kw_only=True)
class LoaderConfig:
    """DataLoader settings; ``keep`` leaves the user's value as it is."""

    section: ClassVar[str] = "loader"
    SHARING: ClassVar[tuple[str, ...]] = ("auto", "keep", "file_descriptor", "file_system")

    num_workers: IntOrWord = AUTO
    """auto | keep | worker processes (>= 0). auto is bounded by cores and RAM and never
    raises workers for an IterableDataset."""
    pin_memory: BoolOrWord = AUTO
    """auto (on when batches go to a CUDA device) | keep | true | false."""
    persistent_workers: BoolOrWord = AUTO
    """auto (on when there are workers) | keep | true | false."""
    prefetch_factor: IntOrWord = AUTO
    """auto | keep | batches prefetched per worker (>= 1)."""
    sharing_strategy: str = AUTO
    """auto (torch's default) | keep | file_descriptor | file_system: how workers hand
    batches over (see :mod:`torchboost.techniques.worker_ipc`)."""

    def __post_init__(self) -> None:
        _check_int_or_word("loader.num_workers", self.num_workers, 0, (AUTO, KEEP))
        _check_bool_or_word("loader.pin_memory", self.pin_memory, (AUTO, KEEP))
        _check_bool_or_word("loader.persistent_workers", self.persistent_workers, (AUTO, KEEP))
        _check_int_or_word("loader.prefetch_factor", self.prefetch_factor, 1, (AUTO, KEEP))
        _check_choice("loader.sharing_strategy", self.sharing_strategy, self.SHARING)


@dataclass(frozen=True, kw_only=True)
class OptimizerConfig:
    """Optimizer implementation."""

    section: ClassVar[str] = "optimizer"
    IMPLEMENTATIONS: ClassVar[tuple[str, ...]] = ("auto", "default", "foreach", "fused")

    implementation: str = AUTO
    """auto | default (leave the optimizer as built) | foreach | fused."""

    def __post_init__(self) -> None:
        _check_choice("optimizer.implementation", self.implementation, self.IMPLEMENTATIONS)


@dataclass(frozen=True, kw_only=True)
class MemoryConfig:
    """Memory layout."""

    section: ClassVar[str] = "memory"

    channels_last: BoolOrWord = AUTO
    """auto (on only for 4-D convolutions on CUDA with reduced precision) | true | false."""

    def __post_init__(self) -> None:
        _check_bool_or_word("memory.channels_last", self.channels_last, (AUTO,))


@dataclass(frozen=True, kw_only=True)
class CpuConfig:
    """Host CPU settings."""

    section: ClassVar[str] = "cpu"

    threads: IntOrWord = AUTO
    """auto (leaves cores for loader workers) | keep | intra-op threads (>= 1)."""

    def __post_init__(self) -> None:
        _check_int_or_word("cpu.threads", self.threads, 1, (AUTO, KEEP))


@dataclass(frozen=True, kw_only=True)
class AccumulationConfig:
    """Gradient accumulation and automatic micro-batching.

    Give either ``steps`` or ``effective_batch_size`` (both only when they agree): with
    the loader's batch size B and W processes, ``effective_batch_size = steps * B * W``.
    """

    section: ClassVar[str] = "accumulation"

    steps: int = 1
    """Micro-batches (loader batches) per optimizer step (>= 1)."""
    effective_batch_size: IntOrWord = "off"
    """off | samples per optimizer step over all processes (>= 1); gives ``steps`` from
    the loader's batch size, and must divide by it."""
    micro_batch_size: IntOrWord = AUTO
    """auto | batch | samples per micro-batch (>= 1) in ``Booster.train_step``. auto: the
    largest that fits memory (the whole batch first, halved on out-of-memory); batch: the
    whole batch, halved on out-of-memory."""

    def __post_init__(self) -> None:
        _check_int_or_word("accumulation.steps", self.steps, 1, ())
        _check_int_or_word("accumulation.effective_batch_size", self.effective_batch_size, 1, ("off",))
        _check_int_or_word("accumulation.micro_batch_size", self.micro_batch_size, 1, (AUTO, "batch"))


_SECTIONS: dict[str, type] = {
    cls.section: cls
    for cls in (
        PrecisionConfig,
        CompileConfig,
        LoaderConfig,
        OptimizerConfig,
        MemoryConfig,
        CpuConfig,
        AccumulationConfig,
    )
}


def _unknown(kind: str, name: str, valid: list[str], prefix: str = "") -> ConfigError:
    close = difflib.get_close_matches(name, valid, n=1)
    names = [prefix + v for v in valid]
    hint = f'; did you mean "{prefix}{close[0]}"?' if close else f"; valid: {', '.join(names)}"
    return ConfigError(f'unknown {kind} "{prefix}{name}"{hint}')


@dataclass(frozen=True, kw_only=True)
class BoostConfig:
    """Every torchboost technique's settings. Defaults: everything ``auto``, compile off."""

    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)
    loader: LoaderConfig = field(default_factory=LoaderConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    cpu: CpuConfig = field(default_factory=CpuConfig)
    accumulation: AccumulationConfig = field(default_factory=AccumulationConfig)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            expected = _SECTIONS[f.name]
            if not isinstance(getattr(self, f.name), expected):
                raise ConfigError(f"{f.name}: expected a {expected.__name__}")

    @classmethod
    def off(cls) -> "BoostConfig":
        """Every technique off: a Booster with this config is plain PyTorch."""
        return cls(
            precision=PrecisionConfig(mode="fp32"),
            compile=CompileConfig(mode="off"),
            loader=LoaderConfig(
                num_workers=KEEP, pin_memory=KEEP, persistent_workers=KEEP, prefetch_factor=KEEP,
                sharing_strategy=KEEP,
            ),
            optimizer=OptimizerConfig(implementation="default"),
            memory=MemoryConfig(channels_last=False),
            cpu=CpuConfig(threads=KEEP),
            accumulation=AccumulationConfig(steps=1),
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BoostConfig":
        """Build from nested mappings; missing keys take defaults, unknown keys are an error."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"expected a table of sections; got {type(data).__name__}")
        sections: dict[str, Any] = {}
        for name, values in data.items():
            if name not in _SECTIONS:
                raise _unknown("section", name, list(_SECTIONS))
            section_cls = _SECTIONS[name]
            if not isinstance(values, Mapping):
                raise ConfigError(f"{name}: expected a table; got {_fmt(values)}")
            valid = [f.name for f in dataclasses.fields(section_cls)]
            for key in values:
                if key not in valid:
                    raise _unknown("key", key, valid, prefix=f"{name}.")
            sections[name] = section_cls(**values)
        return cls(**sections)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Nested plain dicts, the shape of ``torchboost.toml``."""
        return dataclasses.asdict(self)

    def replace(self, **changes: Mapping[str, Any]) -> "BoostConfig":
        """A copy with some keys changed: ``cfg.replace(precision={"mode": "bf16"})``."""
        data = self.to_dict()
        for name, values in changes.items():
            if name not in data:
                raise _unknown("section", name, list(data))
            data[name] = {**data[name], **values}
        return BoostConfig.from_dict(data)

    @classmethod
    def from_toml(cls, path: str | Path) -> "BoostConfig":
        """Read a ``torchboost.toml``; errors name the file and the field."""
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        try:
            return cls.from_dict(data)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None

    def to_toml_string(self, header: str = "") -> str:
        """The TOML text, with ``header`` lines as leading comments."""
        comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
        return comment + tomli_w.dumps(self.to_dict())

    def to_toml(self, path: str | Path, header: str = "") -> None:
        """Write atomically: a crash mid-write leaves any previous file intact."""
        atomic_write_bytes(Path(path), self.to_toml_string(header).encode("utf-8"))
