"""A whole run of the user's command under the write guard, not observed.

Tune's end-to-end check runs the command to its end, twice per side, in its own process
group (:func:`~torchboost.process.process_group.run_group`), every Python process of it
under the write guard (:mod:`torchboost.process.guard`) through the tree's start-up hook
(:mod:`torchboost.process.tree_spec`). :func:`run_guard` is the one guard a run is given,
the observed doctor's and trials' runs too.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Iterable

from torchboost.process.guard.run_guard import RunGuard
from torchboost.process.guard.user_files import UserWrites
from torchboost.process.process_group import run_group
from torchboost.process.tree_spec import TreeSpec, tree_env
from torchboost.techniques.compile.compile_cache import compile_cache_env

__all__ = ["run_guard", "run_guarded"]


def run_guarded(argv: list[str], *, env: dict[str, str], timeout_s: float | None, out_dir: Path,
                script: Path | None, writes_ledger: Path | None = None) -> tuple[int | None, UserWrites]:
    """A whole run of the user's command, not observed (tune's end-to-end check): to its end
    in its own group (:func:`.process_group.run_group`), every Python process of it under
    the write guard; (its exit status or None past ``timeout_s``, what it wrote)."""
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    guard = run_guard(out, script, True, writes_ledger)
    with tempfile.TemporaryDirectory(prefix="torchboost-run-") as tmp:
        spec_path = Path(tmp) / "spec.json"
        TreeSpec(guard=guard.spec()).write(spec_path)
        try:
            code = run_group(argv, env={**env, **tree_env(spec_path)}, timeout_s=timeout_s)
        finally:
            writes = guard.settle()
    return code, writes


def run_guard(out: Path, script: Path | None, trial: bool, ledger: Path | None, own: Iterable[str] = ()) -> RunGuard:
    """The run's write guard (a trial's exempts the compile cache it fills; ``own``: the
    names the run itself writes into ``out``), watching the files the run's processes hold
    open for writing; a folder it cannot record is said now, before the run."""
    guard = RunGuard(out, script, also_exempt=compile_cache_env().values() if trial else (), ledger=ledger, own=own)
    if guard.note:
        print(f"torchboost: {guard.note}", file=sys.stderr)
    return guard.watch()
