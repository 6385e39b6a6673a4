"""Two rules the test suite keeps, checked on its own source.

- No test asserts on wall-clock time (STYLE.md, habit 10): a comparison, inside an
  ``assert``, between a clock reading (``time.perf_counter()``, ``time.time()``,
  ``time.monotonic()``, a name or a helper derived from one) and a number written in the
  test. Such a bound passes or fails with the machine's load; the behaviour goes under a
  fake clock, the figure into ``benchmarks/``.
- Every test that starts a process is marked ``slow``, so that ``-m "not slow"`` skips the
  end-to-end tests that start processes, as the README says: a test that calls
  ``subprocess``, ``multiprocessing``/``torch.multiprocessing`` (``spawn``, ``Process``,
  ``Pool``), ``os.fork``/``os.system``, or one of torchboost's commands that runs a command
  (``main(["doctor", ...])``, ``run_observed``, ``run_trial``...), itself or through a
  module-level helper or fixture of its file. A loader's worker processes are not counted:
  they are the unit under test in the loader's own tests, not an end-to-end run.

Each scanner has a twin: a snippet it must flag, and the same snippet mended that it must pass.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

_CLOCKS = {"perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns"}
"""Functions of ``time`` whose readings are wall-clock (``process_time`` is CPU time, also timing)."""
_CLOCKS_BARE = _CLOCKS - {"time"}  # a bare ``time()`` is too common a name to read as one


def _is_clock_call(node: ast.AST, helpers: set[str]) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        base = func.value
        return (func.attr in _CLOCKS | {"process_time"} and isinstance(base, ast.Name)
                and base.id in ("time", "_time"))
    return isinstance(func, ast.Name) and (func.id in _CLOCKS_BARE or func.id in helpers)


_PASS_THROUGH = {"min", "max", "abs", "round", "float", "int", "sum", "sorted"}


def _mentions_clock(node: ast.AST, names: set[str], helpers: set[str]) -> bool:
    """``node`` is a clock reading, or arithmetic on one (``time.monotonic() - start``,
    ``max(elapsed, 0) * 1e3``): what a name computed from it still holds as wall-clock time."""
    if _is_clock_call(node, helpers) or isinstance(node, ast.Name) and node.id in names:
        return True
    if isinstance(node, ast.BinOp):
        return _mentions_clock(node.left, names, helpers) or _mentions_clock(node.right, names, helpers)
    if isinstance(node, ast.UnaryOp):
        return _mentions_clock(node.operand, names, helpers)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _PASS_THROUGH:
        return any(_mentions_clock(a, names, helpers) for a in node.args)
    return False


def _has_number(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool)
               for n in ast.walk(node))


def _clock_helpers(tree: ast.Module) -> set[str]:
    """Functions of the file that return a clock reading or a span of one (``_elapsed_s()``)."""
    helpers: set[str] = set()
    changed = True
    while changed:
        changed = False
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            if fn.name in helpers:
                continue
            names = _clock_names(fn, helpers)
            if any(isinstance(r, ast.Return) and r.value is not None and _mentions_clock(r.value, names, helpers)
                   for r in ast.walk(fn)):
                helpers.add(fn.name)
                changed = True
    return helpers


def _clock_names(scope: ast.AST, helpers: set[str]) -> set[str]:
    """Names in ``scope`` assigned a clock reading or anything computed from one."""
    names: set[str] = set()
    changed = True
    while changed:
        changed = False
        for node in ast.walk(scope):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if _mentions_clock(node.value, names, helpers):
                    for target in targets:
                        for name in (n for n in ast.walk(target) if isinstance(n, ast.Name)):
                            if name.id not in names:
                                names.add(name.id)
                                changed = True
    return names


def timing_assertions(source: str) -> list[int]:
    """Line numbers of the asserts in ``source`` that compare a clock reading with a number."""
    tree = ast.parse(source)
    helpers = _clock_helpers(tree)
    found = []
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))] + [tree]
    for scope in scopes:
        names = _clock_names(scope, helpers)
        for node in ast.walk(scope):
            if not isinstance(node, ast.Assert):
                continue
            for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
                sides = [compare.left, *compare.comparators]
                timed = [i for i, side in enumerate(sides) if _mentions_clock(side, names, helpers)]
                if any(_has_number(side) for j, side in enumerate(sides) for i in timed if i != j):
                    found.append(node.lineno)
                    break
    return sorted(set(found))


# -- processes ----------------------------------------------------------------------------------

_PROCESS_MODULES = {"subprocess", "multiprocessing", "mp", "torch.multiprocessing", "pty"}
_PROCESS_CALLS = {"Popen", "spawn", "start_processes", "Process", "Pool", "fork", "system", "posix_spawn",
                  "run_observed", "run_trial", "tune_with_progress", "run_script", "check_output"}
"""Names whose call starts a process: a module's, or torchboost's own that launch a command."""
_COMMANDS = {"doctor", "tune", "run", "demo", "compare"}
"""torchboost's sub-commands that run a command in a child process (``probe`` and ``export`` do not)."""
_MAINS = {"main", "cli_main"}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


_SUBPROCESS = {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}
_MULTIPROCESSING = {"Process", "Pool", "spawn", "start_processes"}


def _starts_directly(node: ast.AST) -> bool:
    """``node`` itself starts a process: a call of the process modules, or a command's."""
    if not isinstance(node, ast.Call):
        return False
    name = _dotted(node.func)
    head, _, last = name.rpartition(".")
    if head == "subprocess" and last in _SUBPROCESS or name == "Popen":
        return True
    if last in _MULTIPROCESSING and ("multiprocessing" in head or head in ("mp", "ctx", "context")):
        return True
    if head == "os" and last in ("fork", "system", "posix_spawn", "spawnv", "spawnl"):
        return True
    return name in _PROCESS_CALLS and name not in _MULTIPROCESSING | {"Popen"}


def _command_call(node: ast.AST) -> bool:
    """``main(["doctor", ...])``: one of torchboost's commands that runs a command."""
    if not (isinstance(node, ast.Call) and _dotted(node.func).rpartition(".")[2] in _MAINS and node.args
            and isinstance(node.args[0], (ast.List, ast.Tuple)) and node.args[0].elts):
        return False
    first = node.args[0].elts[0]
    return isinstance(first, ast.Constant) and first.value in _COMMANDS


def _refusal_expected(context: ast.expr) -> bool:
    """``pytest.raises(SystemExit)`` or ``pytest.raises(UsageError, ...)``: refused as bad usage."""
    return (isinstance(context, ast.Call) and _dotted(context.func).endswith("raises") and bool(context.args)
            and _dotted(context.args[0]).rpartition(".")[2] in ("SystemExit", "UsageError"))


def _refused(fn: ast.AST) -> set[int]:
    """The ids of the command calls in ``fn`` the test expects refused before anything runs:
    its exit status compared with 2 (bad usage), or inside ``pytest.raises(SystemExit)`` or
    ``pytest.raises(UsageError)``."""
    refused: set[int] = set()
    usage_names = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Compare) and any(isinstance(c, ast.Constant) and c.value == 2
                                                 for c in [node.left, *node.comparators]):
            for side in [node.left, *node.comparators]:
                if isinstance(side, ast.Name):
                    usage_names.add(side.id)
                elif _command_call(side):
                    refused.add(id(side))
        elif isinstance(node, ast.With) and any(_refusal_expected(i.context_expr) for i in node.items):
            refused |= {id(n) for n in ast.walk(node) if _command_call(n) or _starts_directly(n)}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and _command_call(node.value) and any(
                isinstance(t, ast.Name) and t.id in usage_names for t in node.targets):
            refused.add(id(node.value))
    return refused


def _has_slow(node: ast.AST, names: frozenset[str] = frozenset()) -> bool:
    return any(_dotted(n).endswith("mark.slow") or isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def _slow_names(tree: ast.Module) -> frozenset[str]:
    """Module-level names that carry the slow mark: a list of marks holding it, or a
    decorator of the file's that applies it (``@_runs_gpu_sh``)."""
    names: frozenset[str] = frozenset()
    changed = True
    while changed:
        changed = False
        for node in tree.body:
            found = []
            if isinstance(node, ast.Assign) and _has_slow(node.value, names):
                found = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _has_slow(node, names):
                found = [node.name]
            if set(found) - names:
                names, changed = names | set(found), True
    return names


def _marked_slow(decorators: list[ast.expr], names: frozenset[str] = frozenset()) -> bool:
    return any(_has_slow(d, names) for d in decorators)


def _module_slow(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                for t in node.targets):
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            if _marked_slow(values):
                return True
    return False


def unmarked_process_tests(source: str) -> list[str]:
    """The tests in ``source`` that start a process (themselves, or through a function or
    fixture of the same file) and are not marked slow."""
    tree = ast.parse(source)
    if _module_slow(tree):
        return []
    slow = _slow_names(tree)
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    classes_slow: dict[str, bool] = {}
    owner: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            classes_slow[node.name] = _marked_slow(node.decorator_list, slow)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    functions.setdefault(item.name, item)
                    owner[item.name] = node.name

    def uses(fn: ast.AST) -> set[str]:
        """The file's functions ``fn`` calls or names (a fixture by its parameter)."""
        named = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
        named |= {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)}
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            named |= {a.arg for a in fn.args.args + fn.args.kwonlyargs}
        return named & set(functions)

    starts: dict[str, bool] = {}

    def starts_process(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name not in starts:
            fn = functions[name]
            refused = _refused(fn)
            starts[name] = any((_starts_directly(n) or _command_call(n)) and id(n) not in refused
                               for n in ast.walk(fn)) or any(
                starts_process(other, seen | {name}) for other in uses(fn) - seen - {name})
        return starts[name]

    found = []
    for name, fn in functions.items():
        if not name.startswith("test"):
            continue
        if _marked_slow(fn.decorator_list, slow) or classes_slow.get(owner.get(name, ""), False):
            continue
        if starts_process(name):
            found.append(name)
    return found


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "data" not in p.relative_to(TESTS).parts[:1])


def test_no_test_asserts_on_wall_clock_time():
    found = {str(path.relative_to(TESTS)): lines for path in _test_files()
             if (lines := timing_assertions(path.read_text(encoding="utf-8")))}
    assert found == {}, f"timing assertions (use a fake clock, or a benchmark): {found}"


def test_every_test_that_starts_a_process_is_marked_slow():
    found = {str(path.relative_to(TESTS)): names for path in _test_files() if path.name.startswith("test_")
             if (names := unmarked_process_tests(path.read_text(encoding="utf-8")))}
    assert found == {}, f"tests that start a process without @pytest.mark.slow: {found}"


TIMED = '''
import time

def _elapsed(start):
    return time.monotonic() - start

def test_fast():
    started = time.perf_counter()
    work()
    assert time.perf_counter() - started < 5.0

def test_fast_too():
    t0 = time.time()
    elapsed = time.time() - t0
    assert elapsed <= 2

def test_fast_by_helper():
    assert _elapsed(0.0) < 40
'''


def test_twin_the_timing_scanner_flags_asserts_on_the_clock():
    assert timing_assertions(TIMED) == [10, 15, 18]


@pytest.mark.parametrize("mended", [
    "import time\ndef test_polls():\n    deadline = time.monotonic() + 300\n"
    "    while time.monotonic() < deadline:\n        pass\n",  # a poll's bound is no assertion
    "import time\ndef test_fake(clock):\n    assert clock() - 0.0 < 5.0\n",  # a fake clock's reading
    "import time\ndef test_order():\n    a = time.monotonic()\n    b = time.monotonic()\n    assert a <= b\n",
])
def test_twin_the_timing_scanner_passes_what_is_not_a_wall_clock_bound(mended):
    assert timing_assertions(mended) == []


STARTS = '''
import subprocess
import sys
import pytest
from torchboost.cli import main

def _cli(*args):
    return subprocess.run([sys.executable, "-m", "torchboost.cli", *args])

@pytest.fixture
def spawned():
    import torch.multiprocessing as mp
    mp.spawn(print, nprocs=1)

def test_through_a_helper():
    _cli("doctor")

def test_through_main(tmp_path):
    main(["tune", "--", "python", "x.py"])

def test_through_a_fixture(spawned):
    pass

def test_refuses_usage():
    main(["export", "--format", "lightning"])
    assert main(["doctor", "--steps", "0", "--", "python", "x.py"]) == 2

@pytest.mark.slow
def test_marked():
    _cli("doctor")

_SLOW = [pytest.mark.slow]

def _end_to_end(test):
    for mark in _SLOW:
        test = mark(test)
    return test

@_end_to_end
def test_marked_by_a_decorator_of_the_file():
    _cli("doctor")
'''


def test_twin_the_process_scanner_flags_unmarked_tests_that_start_processes():
    assert unmarked_process_tests(STARTS) == ["test_through_a_helper", "test_through_main", "test_through_a_fixture"]
    assert unmarked_process_tests("import pytest\npytestmark = pytest.mark.slow\n" + STARTS) == []
