"""Reading a Kineto trace recorded elsewhere: the facts ``torchboost doctor --trace`` diagnoses.

A trace is a Chrome-trace JSON file as ``torch.profiler`` writes it (``.json`` or
``.json.gz``), or a folder of them, one per rank. The rank is the file's own
``distributedInfo.rank`` when it has one, else the order of the files. From each file
come the steps (the host's ``ProfilerStep#N`` ranges, their data-loader wait), the device and
the GPU facts (:mod:`torchboost.diagnose.gpu`); nothing else of a live run (the model,
the optimizer, memory) can be known from a trace, so those facts stay empty.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

from torchboost._intervals import covered
from torchboost.evidence.observed import Facts, StepRecord
from torchboost.diagnose.gpu import STEP_MARK_CATS, gpu_facts
from torchboost.usage import UsageError

__all__ = ["facts_from_trace", "load_traces"]

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_SUFFIXES = (".json", ".json.gz")


def load_traces(path: str | Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every trace at ``path`` (a file, or a folder of rank files), parsed; UsageError when
    there is none or one does not parse."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(_SUFFIXES))
    elif path.is_file():
        files = [path]
    else:
        raise UsageError(f"--trace {path}: no such file or folder")
    if not files:
        raise UsageError(f"--trace {path}: no .json or .json.gz trace in this folder")
    traces = []
    for file in files:
        try:
            opener = gzip.open if file.name.endswith(".gz") else open
            with opener(file, "rt", encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, EOFError, ValueError, UnicodeDecodeError) as exc:
            raise UsageError(f"--trace {file}: not a readable trace ({type(exc).__name__}: {exc})") from None
        if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
            raise UsageError(f"--trace {file}: not a Chrome trace (no traceEvents list)")
        traces.append((file, data))
    return traces


def facts_from_trace(file: Path, data: dict[str, Any], position: int) -> Facts:
    """The :class:`Facts` a trace shows: steps, the data-loader wait in each, the GPU facts."""
    events = [e for e in data["traceEvents"] if isinstance(e, dict)]
    info = data.get("distributedInfo") or {}
    rank = int(info.get("rank", position)) if isinstance(info, dict) else position
    steps = sorted((int(m.group(1)), float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
                   for e in events if e.get("ph") == "X" and e.get("cat") in STEP_MARK_CATS
                   and (m := _STEP.match(str(e.get("name", "")))))
    loader = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events
              if e.get("ph") == "X" and str(e.get("name", "")).startswith("enumerate(DataLoader)")]
    records = [StepRecord(index, (end - start) / 1e3,
                          data_ms=covered((max(s, start), min(e, end)) for s, e in loader if s < end and e > start) / 1e3)
               for index, start, end in steps]
    gpu = gpu_facts(events)
    device = "cuda" if gpu is not None else "cpu"
    world = int(info.get("world_size", 1)) if isinstance(info, dict) else 1
    return Facts(env={"device": device, "trace": str(file)}, command=["--trace", str(file)], steps=records,
                 warmup_steps=0, step_source="trace", ended="trace", gpu=gpu.to_dict() if gpu else None,
                 rank=rank, world_size=max(world, 1), target_steps=len(records) or None)
