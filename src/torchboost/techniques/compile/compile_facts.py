"""What torch.compile did in the observed process: its cost, its cache, its graph breaks and recompiles.

Read at every facts write from what PyTorch keeps of its own compiles — Dynamo's
compilation metrics (per compiled frame: the time in tracing, in the backend and in
code generation, cache hits and misses, the guard that failed when it recompiled) and
its graph-break reasons with the user's stack — never by importing the compiler: a
process that never imported Dynamo compiled nothing.

PyTorch keeps only its last 64 metrics entries, and a long run's runtime entries push the
compiles out: :func:`harvest` copies each new compile's entry as it appears (the stall
watchdog calls it twice a second, and every facts write does).

Each graph break comes with where it happened (the innermost frame of the compiled
code, the user's ``file:line``) and what to change, in plain words.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

__all__ = ["CompileFacts", "GraphBreak", "Recompile", "harvest", "observe_compile"]

_HARVESTED: list[Any] = []
"""Every compile's metrics entry seen so far in this process, in order."""
_SEEN: set[int] = set()


_OURS = tuple(str(Path(__file__).resolve().parents[2] / part) for part in ("observe", "nocode.py"))
"""The observer's and the no-code applier's own code: its hooks, which Dynamo may trace as frames of their own
(folded to nothing), are not the script's compiles (the built-in workloads' are)."""


def harvest() -> None:
    """Copy the compiles' entries PyTorch keeps now (before newer ones push them out); cheap,
    and nothing is imported: a process without Dynamo has none."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None or not hasattr(utils, "get_compilation_metrics"):  # not imported, or being imported
        return
    for m in list(utils.get_compilation_metrics()):
        if id(m) not in _SEEN and not getattr(m, "is_runtime", False) and not str(m.co_filename or "").startswith(_OURS):
            _SEEN.add(id(m))  # the entry is kept below, so its id stays its own
            _HARVESTED.append(m)


@dataclass(frozen=True)
class GraphBreak:
    """One place where Dynamo had to end a graph and run Python."""

    reason: str
    """Dynamo's reason, its first line ("Unsupported Tensor.item() call ...")."""
    where: str
    """``file:line`` of the code being compiled where it broke."""
    code: str
    """That line of source."""
    fix: str
    """What to change, in words."""
    count: int = 1
    """Times a compile met it (each recompile meets it again)."""


@dataclass(frozen=True)
class Recompile:
    """A function compiled again because a guard of its earlier compile failed."""

    function: str
    where: str
    """``file:line`` of the function."""
    reasons: tuple[str, ...]
    """The first few failed guards, each once ("tensor 'x' size mismatch at index 0. expected 4, actual 5")."""
    count: int
    """Recompiles of this function."""
    kind: str = "other"
    """What changed: "shape", "dtype", "grad mode" (training and evaluation), "a Python
    value" (a number or object the code was specialised on), or "other"."""
    fix: str = ""
    """What to change, in words."""


def _typed(kind: type, items: Any) -> tuple:
    return tuple(item if isinstance(item, kind) else kind(**{**item, **(
        {"reasons": tuple(item["reasons"])} if "reasons" in item else {})}) for item in items or ())


@dataclass(frozen=True)
class CompileFacts:
    """torch.compile in the observed process (all zero when it compiled nothing)."""

    technique: ClassVar[str] = "compile"

    frames: int = 0
    """Frames compiled (a graph break or a recompile adds one)."""
    graphs: int = 0
    """Distinct graphs Dynamo captured."""
    compile_s: float = 0.0
    """Seconds spent compiling, forward frames and lazily compiled backwards together."""
    tracing_s: float = 0.0
    """Of which Dynamo's tracing (Python bytecode to a graph)."""
    backend_s: float = 0.0
    """Of which the backend (AOTAutograd and Inductor: lowering, code generation, C++/Triton builds)."""
    code_gen_s: float = 0.0
    """Of ``backend_s``, Inductor's code generation and builds."""
    cache_hits: int = 0
    """Graphs loaded from the compile caches (Inductor's FX graph cache, AOTAutograd's)."""
    cache_misses: int = 0
    """Graphs compiled from scratch."""
    cache_dir: str = ""
    """Inductor's cache folder in the observed process."""
    recompile_limit: int = 0
    """Dynamo's recompile limit: a function recompiled this often runs uncompiled from then on."""
    graph_breaks: tuple[GraphBreak, ...] = ()
    recompiles: tuple[Recompile, ...] = ()

    def __post_init__(self) -> None:  # rebuilt from report.json's dicts
        object.__setattr__(self, "graph_breaks", _typed(GraphBreak, self.graph_breaks))
        object.__setattr__(self, "recompiles", _typed(Recompile, self.recompiles))

    @property
    def cache(self) -> str:
        """"cold" (something compiled from scratch), "warm" (all from the cache), "" (no compile)."""
        if self.cache_misses:
            return "cold"
        return "warm" if self.cache_hits else ""


_FIXES = (
    ("Tensor.item()", "a Python number taken from a tensor (.item()) inside the compiled code: keep it a "
                      "tensor, move it out of forward, or set torch._dynamo.config.capture_scalar_outputs = True"),
    ("`print`", "a print inside the compiled code: remove it, or move it out of forward"),
    ("logging", "a log call inside the compiled code: move it out of forward"),
    ("data-dependent", "control flow on a tensor's value: use torch.where or torch.cond, or move the branch "
                       "out of forward"),
    ("Data-dependent", "control flow on a tensor's value: use torch.where or torch.cond, or move the branch "
                       "out of forward"),
)


def _fix(reason: str) -> str:
    """What to change for ``reason``: our words for the common breaks, else Dynamo's own hints."""
    for needle, words in _FIXES:
        if needle in reason:
            return words
    hints = [line.strip()[len("Hint:"):].strip() for line in reason.splitlines() if line.strip().startswith("Hint:")]
    return " ".join(hints) or "move the unsupported call out of the compiled function"


def _graph_breaks(utils: Any) -> tuple[GraphBreak, ...]:
    seen: Counter[tuple[str, str, str]] = Counter()
    for item in list(getattr(utils, "graph_break_reasons", ())):
        stack = list(getattr(item, "user_stack", None) or [])
        frame = stack[-1] if stack else None
        where = f"{frame.filename}:{frame.lineno}" if frame is not None else "?"
        code = (frame.line or "").strip() if frame is not None else ""
        seen[(str(item.reason), where, code)] += 1
    return tuple(GraphBreak(reason=reason.splitlines()[0] if reason else "", where=where, code=code,
                            fix=_fix(reason), count=n) for (reason, where, code), n in seen.items())


_GUARD_KINDS = (("grad_mode", "grad mode"), ("size mismatch", "shape"), ("stride mismatch", "shape"), ("dtype mismatch", "dtype"),
                ("==", "a Python value"), ("___check_obj_id", "a Python value"), ("type_id", "a Python value"))


def _guard(reason: str) -> str:
    """Dynamo's failed guard without its compile id and source comment: "tensor 'x' size mismatch ..."."""
    line = reason.strip().splitlines()[0] if reason.strip() else ""
    head, _, rest = line.partition(": ")
    line = rest if rest and "/" in head and head.replace("/", "").isdigit() else line
    return line.split("  #")[0].strip()


_RECOMPILE_FIXES = {
    "shape": "the input's shape changes between calls: pad inputs to a few fixed sizes, or compile with "
             "dynamic=True (or torch._dynamo.mark_dynamic on that dimension)",
    "dtype": "the input's dtype changes between calls: cast to one dtype before the call",
    "grad mode": "the model runs both with gradients (training) and without (evaluation under torch.no_grad): "
                 "one compile for each is expected; nothing to change",
    "a Python value": "the code is specialised on a Python number or object that changes between calls "
                      "(often an .item() result past a graph break, or a counter passed in): pass it as a "
                      "tensor, or remove the graph break before it",
    "other": "see the failed guard: the value it checks changes between calls",
}


def _kind(guards: list[str]) -> str:
    for needle, kind in _GUARD_KINDS:
        if any(needle in g for g in guards):
            return kind
    return "other"


def _frame(m: Any) -> str:
    """The compiled frame's number: "1" of compile id "1/7" (its recompiles share it)."""
    return str(getattr(m, "compile_id", "") or "").split("/")[0]


def _recompiles(metrics: list[Any]) -> tuple[Recompile, ...]:
    # A recompile that hit the limit is recorded without its function's name: found by its frame.
    names = {_frame(m): (str(m.co_name), f"{m.co_filename}:{m.co_firstlineno}") for m in metrics if m.co_name}
    by_function: dict[tuple[str, str], list[str]] = {}
    for m in metrics:
        if getattr(m, "recompile_reason", None):
            key = names.get(_frame(m), ("?", "?"))
            by_function.setdefault(key, []).append(_guard(str(m.recompile_reason)))
    return tuple(Recompile(function=name, where=where, reasons=tuple(dict.fromkeys(guards))[:3], count=len(guards),
                           kind=_kind(guards), fix=_RECOMPILE_FIXES[_kind(guards)])
                 for (name, where), guards in by_function.items())


def _seconds(metrics: list[Any]) -> dict[str, float]:
    def s(value: Any, scale: float = 1.0) -> float:
        return float(value) * scale if value else 0.0

    forward = [m for m in metrics if m.is_forward is not False]
    backward = [m for m in metrics if m.is_forward is False]
    whole = sum(s(m.entire_frame_compile_time_s) for m in forward)
    backend = sum(s(m.backend_compile_time_s) for m in forward)
    back = sum(s(m.backward_cumulative_compile_time_us, 1e-6) for m in backward)
    code_gen = sum(s(m.code_gen_time_s) for m in forward) + sum(
        s(m.inductor_code_gen_cumulative_compile_time_us, 1e-6) for m in backward)
    return {"compile_s": whole + back, "tracing_s": max(whole - backend, 0.0), "backend_s": backend + back,
            "code_gen_s": code_gen}


def _cache_counts(metrics: list[Any]) -> tuple[int, int]:
    def n(m: Any, name: str) -> int:
        return int(getattr(m, name, 0) or 0)

    hits = sum(n(m, "inductor_fx_local_cache_hit_count") + n(m, "aotautograd_local_cache_hit_count") for m in metrics)
    misses = sum(n(m, "inductor_fx_local_cache_miss_count") + n(m, "aotautograd_local_cache_miss_count")
                 for m in metrics)
    return hits, misses


def observe_compile(since: float = 0.0) -> CompileFacts:
    """What torch.compile did in this process since ``since`` (``time.time()``); nothing
    imported that was not."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return CompileFacts()
    harvest()
    metrics = [m for m in _HARVESTED if (getattr(m, "start_time", None) or since) >= since]
    if not metrics:
        return CompileFacts()
    cache_dirs = sys.modules.get("torch._inductor.runtime.cache_dir_utils")
    config = sys.modules.get("torch._dynamo.config")
    hits, misses = _cache_counts(metrics)
    return CompileFacts(
        frames=sum(1 for m in metrics if m.is_forward is not False),
        graphs=int(utils.counters["stats"].get("unique_graphs", 0)),
        **{k: round(v, 3) for k, v in _seconds(metrics).items()},
        cache_hits=hits, cache_misses=misses,
        cache_dir=str(cache_dirs.cache_dir()) if cache_dirs is not None else "",
        recompile_limit=int(getattr(config, "recompile_limit", 0) or 0),
        graph_breaks=_graph_breaks(utils), recompiles=_recompiles(metrics),
    )


def to_json(facts: CompileFacts) -> dict[str, Any]:
    """``facts`` as report.json's ``compile`` section (with its cache state in words)."""
    return {**dataclasses.asdict(facts), "cache": facts.cache}
