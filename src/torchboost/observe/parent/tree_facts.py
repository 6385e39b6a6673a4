"""The observer's side of a command's tree, once it has ended: the facts of the processes that trained.

Every Python process of the command is reached by the start-up hook of
:mod:`torchboost.process.tree_spec`, whose spec names the observer; a process that trains
writes ``facts.pidN.json`` (and its trace and step count, tagged alike). After the run,
:func:`adopt_trainers` orders those by rank (torch.distributed's, else the order they
started in) and gives them the names a torchrun job's ranks have (``facts.json``,
``facts.rank1.json``, ...), so the report reads them as it reads any job's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import psutil

from torchboost import _json as strict_json
from torchboost._io import atomic_write_bytes
from torchboost.evidence.observed import Facts
from torchboost.observe.spec import FACTS_FILE, TRACE_FILE, ChildCount, rank_file, read_count, tree_file
from torchboost.process.tree_spec import hellos

__all__ = ["adopt_trainers", "trainers_ended", "tree_counts", "tree_files"]


def _tagged(name: str) -> str:
    return tree_file(name, 0).replace(".pid0", ".pid*")


def tree_files(out: Path) -> list[Path]:
    """Every process-tagged file of a run in ``out`` (facts and traces)."""
    return [*out.glob(_tagged(FACTS_FILE)), *out.glob(_tagged(TRACE_FILE))]


def tree_counts(count_path: str | None) -> list[ChildCount]:
    """The step counts the tree's processes left beside ``count_path`` (one per process that stepped)."""
    if not count_path:
        return []
    folder, name = os.path.split(count_path)
    counts = (read_count(p) for p in Path(folder).glob(f"{name}.pid*"))
    return [c for c in counts if c is not None]


def trainers_ended(count_path: str | None) -> Callable[[], bool] | None:
    """A check: have the tree's processes that trained (each left a step count beside
    ``count_path``) all ended? False while none has trained."""
    if not count_path:
        return None
    folder, name = os.path.split(count_path)

    def ended() -> bool:
        pids = [int(p.name.rsplit(".pid", 1)[1]) for p in Path(folder).glob(f"{name}.pid*")]
        return bool(pids) and not any(_alive(pid) for pid in pids)

    return ended


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def adopt_trainers(out: Path, scratch: Path) -> list[Facts]:
    """The facts of the tree's processes that trained, by rank, renamed as a job's ranks'
    files, each naming its process (from the lines in ``scratch``); [] when none did."""
    named = hellos(scratch)
    found = []
    for path in out.glob(_tagged(FACTS_FILE)):
        pid = int(path.name.split(".")[1][3:])
        facts = Facts.from_dict(strict_json.loads(path.read_text(encoding="utf-8")))
        found.append((facts.rank if facts.world_size > 1 else 0, pid, facts, path))
    found.sort(key=lambda item: item[:2])
    trainers = []
    for rank, (_, pid, facts, path) in enumerate(found):
        facts.rank, facts.world_size = rank, max(len(found), facts.world_size)
        facts.process = named.get(pid, f"pid {pid}")
        trace = out / tree_file(TRACE_FILE, pid)
        if trace.is_file():
            os.replace(trace, out / rank_file(TRACE_FILE, rank))
            if facts.profile is not None:
                facts.profile.trace_path = rank_file(TRACE_FILE, rank)
        atomic_write_bytes(out / rank_file(FACTS_FILE, rank), strict_json.dumps(facts.to_dict(), indent=1).encode())
        path.unlink()
        trainers.append(facts)
    return trainers
