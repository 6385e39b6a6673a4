"""BoostConfig: validation names the field, unknown keys suggest, TOML round-trips, writes are atomic."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from torchboost import BoostConfig, ConfigError
from torchboost._io import atomic_writer
from torchboost.techniques.accumulation import AccumulationConfig
from torchboost.techniques.compile import CompileConfig
from torchboost.techniques.cpu import CpuConfig
from torchboost.techniques.loader import LoaderConfig
from torchboost.techniques.memory import MemoryConfig
from torchboost.techniques.optimizer import OptimizerConfig
from torchboost.techniques.precision import PrecisionConfig

# (section class, field, a bad value, words the error must contain)
BAD_VALUES = [
    (PrecisionConfig, "mode", "bf17", ["precision.mode", "auto, fp32, tf32, bf16, fp16", '"bf17"']),
    (PrecisionConfig, "mode", 16, ["precision.mode", "got 16"]),
    (CompileConfig, "mode", "fast", ["compile.mode", "reduce-overhead", '"fast"']),
    (CompileConfig, "scope", "layer", ["compile.scope", "model, regional"]),
    (LoaderConfig, "num_workers", -1, ["loader.num_workers", "an integer from 0 to", "-1"]),
    (LoaderConfig, "num_workers", 10**17, ["loader.num_workers", "an integer from 0 to", str(10**17)]),
    (LoaderConfig, "num_workers", True, ["loader.num_workers", "got true"]),
    (LoaderConfig, "num_workers", "many", ["loader.num_workers", "auto | keep"]),
    (LoaderConfig, "pin_memory", "yes", ["loader.pin_memory", "true", "false"]),
    (LoaderConfig, "persistent_workers", 1, ["loader.persistent_workers", "got 1"]),
    (LoaderConfig, "prefetch_factor", 0, ["loader.prefetch_factor", "an integer from 1 to 1024"]),
    (LoaderConfig, "prefetch_factor", 2.5, ["loader.prefetch_factor", "2.5"]),
    (LoaderConfig, "sharing_strategy", "shm", ["loader.sharing_strategy", "file_descriptor, file_system", '"shm"']),
    (LoaderConfig, "shards_by_worker", "yes", ["loader.shards_by_worker", "true", "false"]),
    (OptimizerConfig, "implementation", "apex", ["optimizer.implementation", "foreach, fused"]),
    (MemoryConfig, "channels_last", "keep", ["memory.channels_last", "auto | true | false"]),
    (CpuConfig, "threads", 0, ["cpu.threads", "an integer from 1 to"]),
    (AccumulationConfig, "steps", 0, ["accumulation.steps", "integer >= 1"]),
    (AccumulationConfig, "steps", "auto", ["accumulation.steps", '"auto"']),
    (AccumulationConfig, "effective_batch_size", 0, ["accumulation.effective_batch_size", "off | an integer >= 1"]),
    (AccumulationConfig, "effective_batch_size", "auto", ["accumulation.effective_batch_size", '"auto"']),
    (AccumulationConfig, "micro_batch_size", 0, ["accumulation.micro_batch_size", "auto | batch | an integer >= 1"]),
    (AccumulationConfig, "micro_batch_size", 2.0, ["accumulation.micro_batch_size", "got 2.0"]),
]


def test_every_field_has_a_bad_value_case():
    covered = {(cls.section, name) for cls, name, _, _ in BAD_VALUES}
    every = {
        (cls.section, f.name)
        for cls in (PrecisionConfig, CompileConfig, LoaderConfig, OptimizerConfig, MemoryConfig, CpuConfig,
                    AccumulationConfig)
        for f in dataclasses.fields(cls)
    }
    assert covered == every


@pytest.mark.parametrize("cls,name,value,words", BAD_VALUES)
def test_bad_value_names_field_and_allowed(cls, name, value, words):
    with pytest.raises(ConfigError) as info:
        cls(**{name: value})
    for word in words:
        assert word in str(info.value)
    # The same error comes through the dict and TOML paths.
    with pytest.raises(ConfigError, match=f"{cls.section}.{name}"):
        BoostConfig.from_dict({cls.section: {name: value}})


def test_exact_message_of_the_issue():
    with pytest.raises(ConfigError) as info:
        BoostConfig.from_dict({"precision": {"mode": "bf17"}})
    assert str(info.value) == 'precision.mode: expected one of auto, fp32, tf32, bf16, fp16; got "bf17"'


@pytest.mark.parametrize(
    "data,suggestion",
    [
        ({"precison": {"mode": "bf16"}}, '"precision"'),
        ({"loader": {"num_worker": 2}}, '"loader.num_workers"'),
        ({"compile": {"mdoe": "default"}}, '"compile.mode"'),
    ],
)
def test_unknown_keys_suggest_the_nearest(data, suggestion):
    with pytest.raises(ConfigError, match="did you mean") as info:
        BoostConfig.from_dict(data)
    assert suggestion in str(info.value)


def test_unknown_key_without_near_name_lists_valid():
    with pytest.raises(ConfigError, match="valid: precision.mode"):
        BoostConfig.from_dict({"precision": {"zzzzzz": 1}})


def test_section_must_be_a_table():
    with pytest.raises(ConfigError, match="precision: expected a table"):
        BoostConfig.from_dict({"precision": "bf16"})


def test_toml_round_trip(tmp_path):
    cfg = BoostConfig.from_dict(
        {
            "precision": {"mode": "bf16"},
            "compile": {"mode": "max-autotune", "scope": "regional"},
            "loader": {"num_workers": 3, "pin_memory": True, "persistent_workers": False, "prefetch_factor": 4},
            "optimizer": {"implementation": "fused"},
            "memory": {"channels_last": True},
            "cpu": {"threads": 2},
            "accumulation": {"steps": 4, "effective_batch_size": 128, "micro_batch_size": 16},
        }
    )
    path = tmp_path / "torchboost.toml"
    cfg.to_toml(path, header="tuned\nby hand")
    text = path.read_text()
    assert text.startswith("# tuned\n# by hand\n")
    assert BoostConfig.from_toml(path) == cfg
    assert BoostConfig.from_toml(path) != BoostConfig()  # the round trip is not vacuous
    assert BoostConfig.off() == BoostConfig.from_dict(BoostConfig.off().to_dict())


def test_toml_errors_name_the_file(tmp_path):
    path = tmp_path / "torchboost.toml"
    path.write_text('[precision]\nmode = "bf17"\n')
    with pytest.raises(ConfigError, match=r"torchboost.toml: precision.mode"):
        BoostConfig.from_toml(path)
    path.write_text("[precision\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        BoostConfig.from_toml(path)


def test_replace_validates():
    cfg = BoostConfig().replace(precision={"mode": "fp16"})
    assert cfg.precision.mode == "fp16" and cfg.compile == BoostConfig().compile
    with pytest.raises(ConfigError, match="precision.mode"):
        BoostConfig().replace(precision={"mode": "fp8"})


def test_off_switches_everything_off():
    off = BoostConfig.off()
    assert off.precision.mode == "fp32"
    assert off.compile.mode == "off"
    assert off.optimizer.implementation == "default"
    assert off.memory.channels_last is False
    assert off.cpu.threads == "keep"
    loader = dataclasses.asdict(off.loader)
    assert loader.pop("shards_by_worker") is False  # a fact about the dataset, not a setting to keep
    assert set(loader.values()) == {"keep"}


def test_interrupted_write_leaves_previous_file(tmp_path):
    path = tmp_path / "torchboost.toml"
    BoostConfig.off().to_toml(path)
    before = path.read_bytes()
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic_writer(path) as fh:
            fh.write(b"[precision]\nmode = ")
            raise RuntimeError("disk full")
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["torchboost.toml"]  # no temp file left


@pytest.mark.slow
def test_killed_write_leaves_previous_file(tmp_path):
    path = tmp_path / "torchboost.toml"
    BoostConfig.off().to_toml(path)
    before = path.read_bytes()
    child = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from torchboost._io import atomic_writer
        with atomic_writer(Path({str(path)!r})) as fh:
            fh.write(b"[precision]\\nmode = ")
            fh.flush()
            print("half-written", flush=True)
            time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "half-written"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert path.read_bytes() == before
    assert BoostConfig.from_toml(path) == BoostConfig.off()


def test_non_atomic_twin_would_lose_the_file(tmp_path):
    """The broken twin: writing in place, interrupted, destroys the previous config."""
    path = tmp_path / "torchboost.toml"
    BoostConfig.off().to_toml(path)
    before = path.read_bytes()
    with pytest.raises(RuntimeError):
        with open(path, "wb") as fh:
            fh.write(b"[precision]\nmode = ")
            raise RuntimeError("disk full")
    assert path.read_bytes() != before


def test_an_overlay_checks_only_the_sections_it_carries(monkeypatch):
    """A candidate's change is checked by its own section: no whole configuration is built for
    it, and no other section. Twin: applying it (``on``) builds the whole configuration."""
    from torchboost import config
    from torchboost.config import Overlay

    built: list[str] = []
    real_init = BoostConfig.__init__
    monkeypatch.setattr(BoostConfig, "__init__", lambda self, **s: (built.append("config"), real_init(self, **s))[1])
    for cls in (PrecisionConfig, LoaderConfig):
        real_post = cls.__post_init__
        monkeypatch.setattr(cls, "__post_init__", lambda self, _p=real_post: (built.append(self.section), _p(self))[1])
    overlay = Overlay({"precision.mode": "bf16"})
    assert built == ["precision"]
    with pytest.raises(ConfigError, match="precision.mode"):
        Overlay({"precision.mode": "bf17"})  # still checked, and the error names the field
    built.clear()
    overlay.on(config.BoostConfig())
    assert "config" in built and "loader" in built
