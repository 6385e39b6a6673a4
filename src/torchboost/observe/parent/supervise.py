"""Parent side of the doctor: start the user's command in an observed child, collect its facts.

The child is ``sys.executable -u -m torchboost.observe.child.bootstrap SPEC.json -- TARGET...``:
the same interpreter and environment torchboost runs in (the user's ``python`` word is
accepted and replaced by it). Its stderr passes through to ours (and its last lines are
kept); its stdout passes through to ``stdout`` (ours unless told otherwise).
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable

from torchboost import _json as strict_json
from torchboost._disk import NO_SPACE, NoSpaceError
from torchboost._io import atomic_write_bytes
from torchboost.evidence.observed import Facts
from torchboost.process.process_group import (
    Interrupted, end_group, forwarded_signals, kill_group, signal_name, start_group,
)
from torchboost.process.launch import Launch, UsageError, parse_command, parse_launch
from torchboost.process.relay import PROFILER_LOG, TAIL_CHARS, start_relays
from torchboost.process.guard.user_files import UserWrites
from torchboost.process.guarded import run_guard
from torchboost.process.tree_spec import TreeSpec, processes_seen, tree_env
from torchboost.observe.parent.tree_facts import adopt_trainers, trainers_ended, tree_counts, tree_files
from torchboost.process.wait import Waited, progress_reader, wait_for
from torchboost.observe.parent.request import RunRequest
from torchboost.observe.spec import RUN_FILES, ObserveSpec, rank_file, read_count, reconcile
from torchboost.plan import Plan
from torchboost.handover import TRIAL_SETTINGS_ENV, write_plan
from torchboost.techniques.compile.compile_cache import compile_cache_env

__all__ = ["Launch", "ObservedRun", "Progress", "UsageError", "job_facts", "parse_command", "parse_launch",
           "run_observed"]



@dataclass(frozen=True)
class Progress:
    """Where the child is: ``stage`` ("warm-up", "observing", "profiling", "running"), step of ``of``."""

    stage: str
    step: int
    of: int | None
    compiling_s: float | None = None
    """Seconds the script has been compiling (torch.compile) since its last step, while it does."""

    def words(self) -> str:
        """The progress line: "warm-up step 2/5", or "compiling (40 s so far), warm-up step 0/5"."""
        of = f"/{self.of}" if self.of else ""
        compiling = f"compiling ({self.compiling_s:.0f} s so far), " if self.compiling_s is not None else ""
        return f"{compiling}{self.stage} step {self.step}{of}"


@dataclass
class ObservedRun:
    """Result of :func:`run_observed`."""

    facts: Facts | None
    """What the child wrote (None if it died before writing anything)."""
    exit_code: int
    """The child's exit status: the script's own."""
    stderr_tail: str
    """The last few thousand characters the child wrote to stderr."""
    out_dir: Path
    """Folder holding facts.json (and the trace when a profile was taken)."""
    steps_seen: int = 0
    """Training steps the child saw, warm-up included (0: it never trained)."""
    timed_out: bool = False
    """The child was killed after the run's ``timeout_s``."""
    ranks: list[Facts] = field(default_factory=list)
    """Every rank's facts, by rank, under torchrun (``facts`` is the slowest rank's);
    rank 0's alone for one process."""
    writes: UserWrites | None = None
    """What the run wrote in the user's folders, kept apart in ``<out>/writes/`` and the
    user's files put back; None when the run's writes stay (``full``: the user's real run)."""
    processes: list[str] = field(default_factory=list)
    """The Python processes the command started below the one torchboost started, as
    "pid N (command)" (a wrapper's python, a launcher's workers, spawned ranks)."""


_BOOTSTRAP = "torchboost.observe.child.bootstrap"
"""The observed child, run as ``python -m``."""
_TREE_OBSERVER = "torchboost.observe.child.tree"
"""What observes the other Python processes of the command's tree, named in its spec."""
_DRAIN_S = 0.25
"""Seconds to let the relays copy what an exited child left in its pipes."""


def run_observed(request: RunRequest, *, on_progress: Callable[[Progress], None] | None = None,
                 stdout: Callable[[], IO[str]] | None = None) -> ObservedRun:
    """Run ``request.command`` in an observed child process and return what was seen.

    ``steps`` recorded steps follow ``warmup`` unrecorded ones; then a 3-step profiler
    window (unless ``profile`` is off, as for trials), then the child stops the script
    (unless ``full``); see :class:`RunRequest` for the trials' early stops and bursts.
    ``on_progress`` is called from this thread about five times a second while the child
    runs. ``stdout`` returns the stream for the child's stdout (default ``sys.stdout``;
    ``--json`` sends it to stderr). Raises :class:`UsageError` for a command it cannot run.
    Past ``timeout_s`` the child is killed and ``timed_out`` set.

    Unless ``full``, the user's folders are guarded (:mod:`torchboost.process.guard`;
    ``writes_ledger`` sums many runs' writes).
    SIGINT/SIGTERM/SIGHUP end the child's group and raise :class:`.process_group.Interrupted`.
    """
    launch = parse_launch(request.command)
    out = Path(request.out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    guard = None if request.full else run_guard(out, launch.script, request.apply is not None, request.writes_ledger,
                                                own=(*RUN_FILES, PROFILER_LOG))
    with tempfile.TemporaryDirectory(prefix="torchboost-doctor-") as tmp:
        spec = ObserveSpec(out_dir=str(out), parent_pid=os.getpid(), progress_path=str(Path(tmp) / "progress.json"),
                           count_path=str(Path(tmp) / "steps.count"), guard=guard.spec() if guard else None,
                           **request.spec_fields())
        spec_path = _write_spec(spec, out, Path(tmp))
        argv = launch.argv(_BOOTSTRAP, str(spec_path))
        env = _child_env(request.apply, Path(tmp), spec_path, spec.guard)
        try:
            proc, tail, waited = _run_child(argv, env, spec, echo=request.echo, stdout=stdout,
                                            on_progress=on_progress, timeout_s=request.timeout_s)
        finally:  # a stop too: the user's folders are put back before anything is said
            writes = guard.settle() if guard is not None else None
        run = _collect(out, proc, tail, waited, _child_boundaries(spec), Path(tmp))
        run.processes, run.writes = processes_seen(Path(tmp)), writes
    return run


def _run_child(argv: list[str], env: dict[str, str], spec: ObserveSpec, *, echo: bool,
               stdout: Callable[[], IO[str]] | None, on_progress: Callable[[Progress], None] | None,
               timeout_s: float | None) -> tuple[subprocess.Popen, collections.deque[str], Waited]:
    """Start the child, relay its output and wait for it; (the ended child, its stderr's
    tail, how the wait ended)."""
    proc = _start_child(argv, env=env, echo=echo)
    tail: collections.deque[str] = collections.deque()
    relays = start_relays(proc, tail, echo=echo, stdout=stdout, noise_log=Path(spec.out_dir) / PROFILER_LOG)
    waited = _wait_or_end(proc, spec, on_progress, timeout_s)
    if proc.returncode != 0:  # a failed run can leave its group behind (a worker stuck in __getitem__)
        kill_group(proc)
    if waited.went_on:
        print(f"torchboost: the command went on after its training had ended, and was ended "
              f"({'; '.join(waited.went_on[:3])})", file=sys.stderr)
    # The child has exited and what it wrote is in the pipes; a process it started may
    # still hold them open (torch's shared-memory manager, used by the file_system
    # hand-over, lingers for seconds), so do not wait for their end-of-file.
    for relay in relays:
        relay.join(timeout=_DRAIN_S)
    return proc, tail, waited


def _child_boundaries(spec: ObserveSpec) -> int | None:
    """The step boundaries the ended child counted (None: it counted none). Its failed
    facts.json write is raised as ours: a full disk says so in one line."""
    counts = [c for c in (read_count(spec.count_path), *tree_counts(spec.count_path)) if c is not None]
    for count in counts:
        if count.write_errno in NO_SPACE:
            raise NoSpaceError(spec.facts_path, count.write_errno)
        if count.write_errno:
            raise OSError(count.write_errno, os.strerror(count.write_errno), str(spec.facts_path))
    return max(c.boundaries for c in counts) if counts else None


def _write_spec(spec: ObserveSpec, out: Path, tmp_dir: Path) -> Path:
    """Clear an old run's files from ``out``, write the child's spec; returns its path."""
    old = [out / "facts.json", out / PROFILER_LOG, out / "trace.json", spec.trace_path,
           *out.glob("facts.rank*.json"), *out.glob("trace.rank*.json"), *tree_files(out)]
    for stale in old:
        stale.unlink(missing_ok=True)  # an old run's files (any rank's) must not pass for this one's
    spec_path = tmp_dir / "spec.json"
    spec.write(spec_path)
    return spec_path


def _child_env(apply: Plan | None, tmp_dir: Path, spec_path: Path,
               guard: dict[str, Any] | None) -> dict[str, str]:
    """The child's environment: ours, the start-up hook that reaches every Python process
    of its tree (:mod:`torchboost.process.tree_spec`: the guard, and this package's observer
    with ``spec_path``), and for a tuning trial its settings and the compile cache
    ``torchboost run`` will use (:mod:`~torchboost.techniques.compile.compile_cache`)."""
    tree_path = tmp_dir / "tree.json"
    TreeSpec(guard=guard, observer=_TREE_OBSERVER, observe_spec=str(spec_path)).write(tree_path)
    env = {**os.environ, **tree_env(tree_path)}
    if apply is None:
        return env
    # A tuning trial, the baseline ({}) included: its plan as it was given, written once.
    settings_path = tmp_dir / "trial-settings.json"
    write_plan(settings_path, apply)
    return {**env, **compile_cache_env(), TRIAL_SETTINGS_ENV: str(settings_path)}


def _start_child(argv: list[str], *, env: dict[str, str] | None, echo: bool) -> subprocess.Popen:
    """Start the observed child in a process group of its own (see :mod:`.process_group`), its
    stdout and stderr piped (stdout dropped unless ``echo``), no stdin (:mod:`.no_stdin`)."""
    return start_group(argv, stdout=subprocess.PIPE if echo else subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)


def _wait_or_end(proc: subprocess.Popen, spec: ObserveSpec, on_progress: Callable[[Progress], None] | None,
                 timeout_s: float | None) -> Waited:
    """Wait for the child (:func:`.wait.wait_for`: progress shown, ``timeout_s``, a tree's
    training ended), ending its group if anything interrupts us: a signal is passed on
    (the script may write what it saw), any other error kills it at once."""
    show = None
    if on_progress is not None and spec.progress_path:
        show = progress_reader(Path(spec.progress_path), lambda d: on_progress(Progress(
            stage=d["stage"], step=int(d["step"]), of=d.get("of"), compiling_s=d.get("compiling_s"))))
    trained = None if spec.full else trainers_ended(spec.count_path)
    try:
        with forwarded_signals():
            return wait_for(proc, timeout_s=timeout_s, show=show, trained=trained)
    except Interrupted as exc:
        exc.survivors = end_group(proc, exc.signum)
        raise
    except BaseException:
        kill_group(proc)
        raise


def _collect(out: Path, proc: subprocess.Popen, tail: collections.deque[str], waited: Waited | bool,
             count: int | None = None, scratch: Path | None = None) -> ObservedRun:
    """The run's result from the facts the exited child left in ``out``, corrected with
    its real exit status and last step ``count`` (:func:`~torchboost.observe.spec.reconcile`)."""
    if isinstance(waited, bool):  # as the step-count tests give it
        waited = Waited(timed_out=waited)
    timed_out = waited.timed_out
    facts_path = out / "facts.json"
    raw = strict_json.loads(facts_path.read_text(encoding="utf-8")) if facts_path.is_file() else None
    ranks = _rank_facts(out, Facts.from_dict(raw) if raw is not None else None)
    code = proc.returncode
    if not any(f.steps_seen for f in ranks):  # the training ran in processes the command started itself
        trainers = adopt_trainers(out, scratch) if scratch is not None else []
        if trainers:
            return _tree_run(out, trainers, 0 if waited.went_on else code, tail, timed_out, count)
    if any(f.ended == "stalled" for f in ranks):
        code = 124  # a rank's watchdog ended it: torchrun reports only that a rank failed (1)
    if code < 0:  # killed by a signal: what a shell reports, and the facts say so
        code = 128 - code
        for facts in ranks:
            facts.ended, facts.exit_code, facts.signal = "killed", code, signal_name(-proc.returncode)
    if ranks and reconcile(ranks[0], code, count):  # the child's last write missed its end
        atomic_write_bytes(facts_path, strict_json.dumps(ranks[0].to_dict(), indent=1).encode())
    return ObservedRun(
        facts=job_facts(ranks) if ranks else None,
        ranks=ranks,
        exit_code=code,
        stderr_tail="".join(tail)[-TAIL_CHARS:],
        out_dir=out,
        steps_seen=max(ranks[0].steps_seen if ranks else 0, count or 0),
        timed_out=timed_out,
    )


def _tree_run(out: Path, trainers: list[Facts], code: int, tail: collections.deque[str], timed_out: bool,
              count: int | None) -> ObservedRun:
    """The run whose training happened in processes of the command's tree: their facts as a
    job's ranks, the command's own exit status (124 when a trainer stalled)."""
    if code < 0:
        code = 128 - code
    if any(f.ended == "stalled" for f in trainers):
        code = 124
    return ObservedRun(facts=job_facts(trainers), ranks=trainers, exit_code=code,
                       stderr_tail="".join(tail)[-TAIL_CHARS:], out_dir=out,
                       steps_seen=max([f.steps_seen for f in trainers] + [count or 0]), timed_out=timed_out)


def _rank_facts(out: Path, rank0: Facts | None) -> list[Facts]:
    """Every rank's facts, by rank: rank 0's alone for one process."""
    if rank0 is None:
        return []
    ranks = [rank0]
    for rank in range(1, rank0.world_size):
        path = out / rank_file("facts.json", rank)
        if path.is_file():
            ranks.append(Facts.from_dict(strict_json.loads(path.read_text(encoding="utf-8"))))
    return ranks


def job_facts(ranks: list[Facts]) -> Facts:
    """The facts that speak for a job: its slowest rank's (every rank waits for it at each
    all-reduce, so its step is the job's step); rank 0's on a tie or alone."""
    def mean_step(facts: Facts) -> float:
        return sum(s.total_ms for s in facts.steps) / len(facts.steps) if facts.steps else 0.0

    return max(ranks, key=lambda f: (mean_step(f), -f.rank))
