"""Every Python process of a command's tree: what reaches it, and who it was.

``bash train.sh``, ``accelerate launch train.py`` or a script whose ranks
``torch.multiprocessing`` spawns does not start its training process itself: the
command does, somewhere down its tree, and no command-line word reaches it there. So the
starter writes a :class:`TreeSpec`, and :func:`tree_env` puts the start-up hook
(:data:`INJECT_DIR`, ``sitecustomize.py``) first on the command's ``PYTHONPATH`` and
names the spec in :data:`TREE_ENV`: every Python process of the tree loads the hook,
leaves one line naming itself (:data:`HELLO_DIR`, read back by :func:`processes_seen`)
and, once it imports torch, starts what the spec asks (:mod:`torchboost.process.tree_start`):
the write guard, a plan's settings, and, where the starter observes the run, the observer
the spec names. The process room knows no observer: the one that asks for observation
names its module here, as it names its bootstrap on the child's command line.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchboost import _json as strict_json
from torchboost._io import atomic_write_bytes

__all__ = ["HELLO_DIR", "INJECT_DIR", "TREE_ENV", "TreeSpec", "hellos", "processes_seen", "tree_env"]

TREE_ENV = "TORCHBOOST_OBSERVE_TREE"
"""Names the :class:`TreeSpec` file for every Python process of a command's tree; set only
by torchboost, for the command it starts (the doctor, tune's runs, ``torchboost run`` of a
launcher)."""
INJECT_DIR = Path(__file__).resolve().parent / "inject"
"""The folder holding the start-up hook (``sitecustomize.py``) put first on the tree's PYTHONPATH."""
HELLO_DIR = "processes"
"""Folder (beside the tree's spec) where each Python process of the tree leaves one line at
start-up: its pid, parent pid and command line."""


@dataclass(frozen=True)
class TreeSpec:
    """What every Python process of the command's tree starts once it imports torch."""

    guard: dict[str, Any] | None = None
    """The write guard's spec (:class:`~torchboost.process.guard.guard_spec.WriteGuardSpec`
    as a dict): the user's files are kept as they were; None: the run's writes stay."""
    observer: str | None = None
    """The module that observes each process (its ``observe_process(spec, applier, claims)``);
    None: the processes are only guarded and given the plan handed over, if any."""
    observe_spec: str | None = None
    """The observer's own spec file, handed to it as it is."""

    def write(self, path: Path) -> None:
        """Write the spec as JSON to ``path``."""
        atomic_write_bytes(Path(path), strict_json.dumps(dataclasses.asdict(self), indent=2).encode())

    @classmethod
    def read(cls, path: str | Path) -> "TreeSpec":
        """Read a spec written by :meth:`write`."""
        data = strict_json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(**{f.name: data.get(f.name) for f in dataclasses.fields(cls)})


def tree_env(spec_path: Path) -> dict[str, str]:
    """What the command's environment gains: the start-up hook first on ``PYTHONPATH``, and
    the spec's path for it to find."""
    path = os.environ.get("PYTHONPATH", "")
    return {TREE_ENV: str(spec_path), "PYTHONPATH": os.pathsep.join(p for p in (str(INJECT_DIR), path) if p)}


def hellos(scratch: Path) -> dict[int, str]:
    """pid -> "pid N (its command)" for every Python process of the tree whose spec is in
    ``scratch``, in the order they started."""
    seen = []
    for path in (scratch / HELLO_DIR).glob("*.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            seen.append((path.stat().st_mtime, data["pid"], f"pid {data['pid']} ({' '.join(data['argv'])[:100]})"))
        except (OSError, ValueError, KeyError):
            continue
    return {pid: words for _, pid, words in sorted(seen)}


def processes_seen(scratch: Path) -> list[str]:
    """The Python processes of the tree, as "pid N (its command)", in the order they started."""
    return list(hellos(scratch).values())
