"""The shape of the tree: small pieces, imports that point one way, settings named in one place.

Read from the source as text (``ast``), so each rule is checked on every module, and each
check has a twin on a made-up module that must fail it.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import torchboost
from torchboost.config import section_classes
from torchboost.techniques.registry import Technique, techniques

SRC = Path(torchboost.__file__).parent
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 400
MAX_BOOSTER_CLASS_LINES = 250


def _modules() -> dict[str, ast.Module]:
    return {str(p.relative_to(SRC)): ast.parse(p.read_text(encoding="utf-8")) for p in sorted(SRC.rglob("*.py"))}


def _long_functions(tree: ast.Module) -> list[str]:
    return [f"{node.name}: {node.end_lineno - node.lineno + 1} lines" for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]


def _setting_names() -> set[str]:
    return {f"{name}.{f.name}" for name, cls in section_classes().items() for f in dataclasses.fields(cls)}


def _finding_id_nodes(tree: ast.Module) -> set[int]:
    """String constants that are finding ids: keys of a ``RULES`` table, ``id=`` arguments."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "RULES" for t in node.targets):
            if isinstance(node.value, ast.Dict):
                ids |= {id(k) for k in node.value.keys if k is not None}
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "RULES":
            if isinstance(node.value, ast.Dict):
                ids |= {id(k) for k in node.value.keys if k is not None}
        if isinstance(node, ast.keyword) and node.arg == "id":
            ids.add(id(node.value))
    return ids


def _setting_literals(tree: ast.Module, names: set[str]) -> list[str]:
    finding_ids = _finding_id_nodes(tree)
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
            and id(node) not in finding_ids]


def _imports(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{alias.name}" for alias in node.names}
    return out


def _imports_package(tree: ast.Module, package: str) -> bool:
    return any(name == package or name.startswith(package + ".") for name in _imports(tree))


# -- the rules, on the real tree ----------------------------------------------------------

def test_no_function_over_60_lines():
    long = {path: found for path, tree in _modules().items() if (found := _long_functions(tree))}
    assert long == {}


def test_no_module_over_400_lines():
    sizes = {path: (SRC / path).read_text(encoding="utf-8").count("\n") for path in _modules()}
    assert {p: n for p, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def test_the_booster_class_is_small():
    tree = _modules()["booster.py"]
    booster = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Booster")
    assert booster.end_lineno - booster.lineno + 1 <= MAX_BOOSTER_CLASS_LINES


def test_settings_are_named_only_by_their_technique_and_the_config():
    names = _setting_names()
    assert "loader.num_workers" in names and "precision.mode" in names  # the check has something to find
    found = {path: lits for path, tree in _modules().items()
             if not path.startswith("techniques/") and path != "config.py"
             and (lits := _setting_literals(tree, names))}
    assert found == {}


def test_imports_point_one_way():
    modules = _modules()
    report_to_tune = [p for p, t in modules.items() if p.startswith("report/") and _imports_package(t, "torchboost.tune")]
    tune_to_report = [p for p, t in modules.items() if p.startswith("tune/") and _imports_package(t, "torchboost.report")]
    # __main__.py is `python -m torchboost`: the command itself, as pyproject's console script is
    to_cli = [p for p, t in modules.items()
              if not p.startswith("cli/") and p != "__main__.py" and _imports_package(t, "torchboost.cli")]
    techniques_up = [p for p, t in modules.items() if p.startswith("techniques/") and any(
        _imports_package(t, f"torchboost.{pkg}") for pkg in ("process", "observe", "diagnose", "tune", "report", "cli"))]
    # process/ launches and guards a command; the observer above it uses it, never the other way
    process_up = [p for p, t in modules.items() if p.startswith("process/") and any(
        _imports_package(t, f"torchboost.{pkg}") for pkg in ("observe", "diagnose", "tune", "report", "cli"))]
    assert (report_to_tune, tune_to_report, to_cli, techniques_up, process_up) == ([], [], [], [], [])


def test_no_two_modules_share_a_name():
    names = [Path(p).name for p in _modules() if Path(p).name not in ("__init__.py", "__main__.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_every_section_belongs_to_one_technique_module():
    owners = {t.section.section: t.name for t in techniques() if t.section is not None}
    assert set(owners) == set(section_classes())
    for technique in techniques():
        assert isinstance(technique, Technique)
        if technique.section is not None:
            module = technique.section.__module__
            assert module.startswith("torchboost.techniques."), module


# -- broken twins: each check fails on a module that breaks its rule ------------------------

_BAD = '''
RULES = {"precision.mode": None}

def too_long():
''' + "    x = 1\n" * 61 + '''
def names_a_setting():
    return {"loader.num_workers": 2}

def finding():
    return Finding(id="precision.mode")

from torchboost.tune.search import run_search
'''


def test_the_checks_fail_on_a_module_that_breaks_them():
    tree = ast.parse(_BAD)
    assert _long_functions(tree) == ["too_long: 62 lines"]
    # the dict key of RULES and the id= argument are finding ids; the returned dict is a setting
    assert _setting_literals(tree, _setting_names()) == ["loader.num_workers"]
    assert _imports_package(tree, "torchboost.tune")
    assert not _imports_package(tree, "torchboost.report")


@pytest.mark.parametrize("name", sorted(t.name for t in techniques()))
def test_each_technique_is_described(name):
    technique = next(t for t in techniques() if t.name == name)
    assert technique.title and technique.order > 0
    # One that applies nothing is advice alone: no section, no lever, and a rule saying what to change.
    advice_only = technique.section is None and not technique.levers and bool(technique.rules)
    assert technique.apply is not None or technique.setup is not None or advice_only
    if technique.nocode is None:
        assert technique.nocode_refusal  # it says why it cannot apply from outside


# -- torchrun's variables are read in env.py alone ----------------------------------------

def _torchrun_literals(tree: ast.Module) -> list[str]:
    from torchboost.env import DIST_ENV_VARS

    return sorted(node.value for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in DIST_ENV_VARS)


def _torchrun_readers(modules: dict[str, ast.Module]) -> dict[str, list[str]]:
    """Modules other than env.py that name a torchrun variable, with the names."""
    return {path: found for path, tree in modules.items() if path != "env.py" and (found := _torchrun_literals(tree))}


def test_torchrun_variables_are_named_in_env_alone():
    modules = _modules()
    assert {"RANK", "LOCAL_RANK", "WORLD_SIZE"} <= set(_torchrun_literals(modules["env.py"]))  # something to find
    readers = _torchrun_readers(modules)
    assert readers == {}


_BAD_TORCHRUN = '''
import os

def rank():
    return int(os.environ.get("RANK", "0"))

PARENT_IS_AGENT = "LOCAL_RANK" in os.environ
'''


def test_the_torchrun_check_fails_on_a_module_that_reads_them():
    tree = ast.parse(_BAD_TORCHRUN)
    assert _torchrun_readers({"observe/child/bootstrap.py": tree}) == {"observe/child/bootstrap.py": ["LOCAL_RANK", "RANK"]}
    assert _torchrun_readers({"env.py": tree}) == {}  # env.py is where they belong


# -- small classes: few public methods; the recorder's parts each fit on a screen or two ---

MAX_PUBLIC_METHODS = 15
MAX_RECORDER_PART_LINES = 150
_RECORDER_PARTS = ("observe/record/recorder.py", "observe/record/step_timing.py", "observe/record/loss_capture.py",
                   "observe/record/script_objects.py", "observe/record/stages.py", "observe/record/run_output.py",
                   "observe/record/recording_window.py")


def _public_methods(tree: ast.Module) -> dict[str, int]:
    """Public methods per class (properties are attributes, not counted)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            out[node.name] = sum(1 for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                                 and not n.name.startswith("_")
                                 and not any(ast.unparse(d) == "property" for d in n.decorator_list))
    return out


def _class_lines(tree: ast.Module) -> dict[str, int]:
    return {n.name: n.end_lineno - n.lineno + 1 for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}


def test_no_class_has_more_than_15_public_methods():
    crowded = {f"{path}:{name}": n for path, tree in _modules().items()
               for name, n in _public_methods(tree).items() if n > MAX_PUBLIC_METHODS}
    assert crowded == {}


def test_the_step_recorder_is_small_parts():
    modules = _modules()
    assert "StepRecorder" in _class_lines(modules["observe/record/recorder.py"])
    long = {f"{path}:{name}": n for path in _RECORDER_PARTS
            for name, n in _class_lines(modules[path]).items() if n > MAX_RECORDER_PART_LINES}
    assert long == {}


def test_the_size_checks_fail_on_a_crowded_long_class():
    crowded = "class Crowded:\n" + "".join(f"    def m{i}(self):\n        return {i}\n" for i in range(16))
    crowded += "    @property\n    def p(self):\n        return 0\n"
    tree = ast.parse(crowded)
    assert _public_methods(tree) == {"Crowded": 16} and _class_lines(tree)["Crowded"] == 36
    assert _public_methods(ast.parse(crowded.replace("def m15", "def _m15"))) == {"Crowded": 15}


# -- no import circle among src modules ---------------------------------------------------
#
# Every import counts: module level, inside ``if TYPE_CHECKING:`` and inside functions,
# since a circle hidden by a lazy import is still two modules that cannot be read apart.

def _module_name(path: str) -> str:
    parts = ["torchboost", *Path(path).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph(modules: dict[str, ast.Module]) -> dict[str, set[str]]:
    """Each module's torchboost modules it imports (a name imported from a package that is a
    module of its own counts as that module)."""
    names = {_module_name(path): path for path in modules}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(modules[path]):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*parent, base] if base else parent)
                found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in names else base for a in node.names}
        targets = set()
        for target in found:
            while target and target not in names:
                target = target.rpartition(".")[0]
            if target and target != name:
                targets.add(target)
        graph[name] = targets
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(out)


def test_no_import_circle():
    graph = _import_graph(_modules())
    assert sum(len(v) for v in graph.values()) > 100  # the graph has something to find
    assert _circles(graph) == []


_CIRCLE = {
    "observe/a.py": "from torchboost.observe import b\n",
    "observe/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from torchboost.observe.c import C\n",
    "observe/c.py": "def f():\n    from .a import x\n",
    "observe/d.py": "from torchboost.observe.a import x\n",
}


def test_the_circle_check_fails_on_a_circle_hidden_by_lazy_imports():
    modules = {path: ast.parse(text) for path, text in _CIRCLE.items()}
    assert _circles(_import_graph(modules)) == [["torchboost.observe.a", "torchboost.observe.b", "torchboost.observe.c"]]
    del modules["observe/c.py"]  # break the circle: d's import of a is one-way
    assert _circles(_import_graph(modules)) == []


# -- folders import one way: at every level, no folder imports one that imports it back ------

def _children_graph(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """``package``'s children (its folders and modules, by name) and the children each imports."""
    prefix = package + "."
    out: dict[str, set[str]] = {}
    for source, targets in graph.items():
        if not source.startswith(prefix):
            continue
        child = source[len(prefix):].split(".")[0]
        out.setdefault(child, set())
        out[child] |= {t[len(prefix):].split(".")[0] for t in targets if t.startswith(prefix)} - {child}
    return out


def _folder_circles(graph: dict[str, set[str]]) -> dict[str, list[list[str]]]:
    """For every package, the circles among its children (two folders importing each other,
    at any depth of their modules)."""
    packages = {".".join(name.split(".")[:depth]) for name in graph for depth in range(1, name.count(".") + 1)}
    found = {package: _circles(_children_graph(graph, package)) for package in sorted(packages)}
    return {package: circles for package, circles in found.items() if circles}


def test_no_folder_imports_one_that_imports_it_back():
    assert _folder_circles(_import_graph(_modules())) == {}


_FOLDERS = {
    "observe/__init__.py": "",
    "observe/child/boot.py": "from torchboost.nocode import apply\n",
    "nocode.py": "from torchboost.reach.patch import Patch\n",
    "reach/patch.py": "",
    "tune/search/run.py": "from torchboost.tune.trials.trial import run\n",
    "tune/trials/trial.py": "",
}


def test_twin_a_folder_that_imports_one_importing_it_back_is_found():
    """The made-up tree flows one way; a hook module in reach/ that imports the applier back
    makes a circle of reach and nocode, and a trial that imports the search one of tune's rooms."""
    modules = {path: ast.parse(text) for path, text in _FOLDERS.items()}
    assert _folder_circles(_import_graph(modules)) == {}
    modules["reach/patch.py"] = ast.parse("from torchboost.nocode import apply\n")
    modules["tune/trials/trial.py"] = ast.parse("def f():\n    from torchboost.tune.search.run import x\n")
    assert _folder_circles(_import_graph(modules)) == {"torchboost": [["nocode", "reach"]],
                                                       "torchboost.tune": [["search", "trials"]]}


def _reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others (in-function imports counted)."""
    seen, todo = set(), [start]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_torchboost_run_imports_nothing_of_the_observer():
    """``torchboost run`` observes nothing: it launches through process/ alone."""
    reached = _reached(_import_graph(_modules()), "torchboost.cli.run")
    assert {"torchboost.process.launch", "torchboost.nocode"} <= reached  # the check has something to find
    assert sorted(m for m in reached if m.startswith("torchboost.observe")) == []


def test_twin_a_run_that_reaches_the_observer_through_another_module_is_found():
    modules = {"cli/run.py": ast.parse("from torchboost.process.launch import parse\n"),
               "process/launch.py": ast.parse("def f():\n    from torchboost.observe.spec import Spec\n"),
               "observe/spec.py": ast.parse("")}
    assert _reached(_import_graph(modules), "torchboost.cli.run") == {"torchboost.process.launch",
                                                                     "torchboost.observe.spec"}


MAX_TUNE_MODULES = 8


def test_tune_holds_at_most_8_modules_directly():
    direct = [p for p in _modules() if p.startswith("tune/") and len(Path(p).parts) == 2]
    assert 0 < len(direct) <= MAX_TUNE_MODULES, direct


# -- rooms: observe/ holds few modules directly; a technique's parts live in its package ----

MAX_OBSERVE_MODULES = 12


def _parts_beside_their_technique(paths: list[str]) -> list[str]:
    """``techniques/<t>_<part>.py`` where ``techniques/<t>.py`` or ``techniques/<t>/`` exists."""
    top = {Path(p).parts[1] for p in paths if p.startswith("techniques/") and len(Path(p).parts) >= 2}
    names = {n.removesuffix(".py") for n in top}
    return sorted(p for p in paths if p.startswith("techniques/") and len(Path(p).parts) == 2
                  and "_" in Path(p).stem.lstrip("_") and Path(p).stem.split("_")[0] in names - {Path(p).stem})


def test_observe_holds_at_most_12_modules_directly():
    direct = [p for p in _modules() if p.startswith("observe/") and len(Path(p).parts) == 2]
    assert 0 < len(direct) <= MAX_OBSERVE_MODULES, direct


def test_no_technique_part_sits_beside_its_technique():
    assert _parts_beside_their_technique(list(_modules())) == []


def test_twin_a_part_beside_its_technique_is_found():
    paths = ["techniques/compile/__init__.py", "techniques/compile_facts.py", "techniques/cudnn.py",
             "techniques/_model.py", "techniques/registry.py"]
    assert _parts_beside_their_technique(paths) == ["techniques/compile_facts.py"]


# -- tune/'s objects are composed, not one object cut by inheritance ------------------------

def _base_name(node: ast.expr) -> str:
    return ast.unparse(node.value if isinstance(node, ast.Subscript) else node).split(".")[-1]


def _inherited_within(modules: dict[str, ast.Module], folder: str) -> list[str]:
    """``Class(Base)`` with both defined under ``folder``, Base being no exception and no
    protocol (no base of its own, at any depth, names Exception, an ...Error or Protocol)."""
    classes = {n.name: n for path, tree in modules.items() if path.startswith(folder)
               for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}

    def allowed(cls: ast.ClassDef) -> bool:
        names = [_base_name(b) for b in cls.bases]
        return any(n in ("Exception", "Protocol") or n.endswith(("Error", "Exception")) for n in names) or any(
            n in classes and allowed(classes[n]) for n in names)

    return sorted(f"{cls.name}({name})" for cls in classes.values() for name in map(_base_name, cls.bases)
                  if name in classes and not allowed(classes[name]))


def test_no_class_of_tune_inherits_from_another_but_an_exception_or_a_protocol():
    assert _inherited_within(_modules(), "tune/") == []


def test_twin_a_tune_class_cut_by_inheritance_is_found():
    source = ("class State:\n    pass\nclass Search(State):\n    pass\n"
              "class TrialError(RuntimeError):\n    pass\nclass Timeout(TrialError):\n    pass\n"
              "class Reads(Protocol[T]):\n    pass\nclass Reader(Reads):\n    pass\n")
    modules = {"tune/search/made_up.py": ast.parse(source), "report/other.py": ast.parse("class Page(State):\n    pass\n")}
    assert _inherited_within(modules, "tune/") == ["Search(State)"]


# -- tune/'s rooms show its flow: trials, the search, the check, the tune, its report --------

MAX_TUNE_FLOORS = 5


def _floors(graph: dict[str, set[str]], package: str) -> dict[str, int]:
    """Each child of ``package`` (folder or module) on its floor: 1 for one that imports no
    sibling, else one above the highest sibling it imports (no circle: the folder check)."""
    children = _children_graph(graph, package)
    floors: dict[str, int] = {}

    def floor(child: str) -> int:
        if child not in floors:
            floors[child] = 1 + max((floor(t) for t in children.get(child, ()) if t in children), default=0)
        return floors[child]

    for child in children:
        floor(child)
    return floors


def test_tune_stands_on_at_most_5_floors_its_plain_data_below_the_check():
    floors = _floors(_import_graph(_modules()), "torchboost.tune")
    assert floors["trials"] < floors["search"] < floors["verify"] < floors["tuner"]  # the flow, bottom up
    assert max(floors.values()) <= MAX_TUNE_FLOORS, floors
    # What a tune is asked and produced is plain data: nothing it needs stands above the check.
    assert floors["run_data"] <= floors["verify"], floors


def test_twin_a_tune_whose_plain_data_holds_a_type_of_the_check_is_found():
    """Made up as tune stood: the run's data imports the check's result, so it stands above the
    check, and the ending, the tuner and the report data each a floor higher."""
    tree = {"tune/trials/trial.py": "", "tune/search/run.py": "from torchboost.tune.trials.trial import run\n",
            "tune/verify/check.py": "from torchboost.tune.search.run import x\n",
            "tune/run_data.py": "from torchboost.tune.verify.check import EndToEnd\n",
            "tune/ending.py": "from torchboost.tune.run_data import TuneRun\nfrom torchboost.tune.verify import check\n",
            "tune/tuner.py": "from torchboost.tune.ending import write_result\n",
            "tune/report_data.py": "from torchboost.tune.tuner import TuneRun\n"}
    floors = _floors(_import_graph({p: ast.parse(t) for p, t in tree.items()}), "torchboost.tune")
    assert floors["run_data"] > floors["verify"] and max(floors.values()) == 7
    tree["tune/run_data.py"] = "from torchboost.tune.trials.trial import EndToEnd\n"  # its records below the check
    tree["tune/report_data.py"] = "from torchboost.tune.run_data import TuneRun\n"
    floors = _floors(_import_graph({p: ast.parse(t) for p, t in tree.items()}), "torchboost.tune")
    assert floors["run_data"] <= floors["verify"] and max(floors.values()) == 5


def test_the_plan_speaks_no_frameworks_words_and_tune_reads_no_signatures():
    """The plan is the techniques' (a Trainer's flag comes from a technique's own spelling); the
    search hands its measure fixed keywords (a protocol), never reading what it takes."""
    modules = _modules()
    assert not _imports_package(modules["plan.py"], "torchboost.frameworks")
    assert [p for p, t in modules.items() if p.startswith("tune/") and _imports_package(t, "inspect")] == []
    assert _imports_package(ast.parse("import inspect\n"), "inspect")  # the twin: found where it is
