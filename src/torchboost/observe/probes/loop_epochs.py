"""The epochs of the script's own loop: ``for epoch in range(3): for x, y in tqdm(loader)``.

A script that writes its epochs into the loop itself names no setting to read
(:mod:`~torchboost.observe.probes.stated_length`): the count is the ``range`` of the loop
around the one over its DataLoader. :func:`loop_epochs` reads it from the script's frames
on the call stack while its loop runs: each frame's current line is placed in its own
source (parsed, never run), the ``for`` statements around it are taken innermost first,
frame by frame outwards (an epoch loop in ``main`` around a ``train_one_epoch`` call
counts too), and the first whose iterable names a DataLoader (``loader``,
``tqdm(loader)``, ``enumerate(self.train_loader)``) is the batch loop; the ``range``
loops right around it are the epochs, their product the count. Their bounds are read as
plain values only: whole-number literals, and names, attributes and constant-key
subscripts of the script's own scopes read without running any of its code (no property,
no ``__getattr__``), joined by ``+ - * //``; anything else leaves the loop unread. A loop
over something else than a ``range`` ends the epochs read (what it runs over is not
known).
"""

from __future__ import annotations

import ast
import inspect
import linecache
import math
import operator
import sys
import types
from typing import Any, Callable, Mapping, Sequence

from torch.utils.data import DataLoader

from torchboost.reach import frames

__all__ = ["enclosing_loops", "loop_epochs"]

_OPERATORS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_UNREAD = object()
"""A value :func:`_value` could not read as plain data."""
_trees: dict[str, ast.Module | None] = {}
"""Each script file's parsed source, by path (None: unreadable)."""


def _tree(path: str) -> ast.Module | None:
    if path not in _trees:
        try:
            _trees[path] = ast.parse("".join(linecache.getlines(path)) or "\n")
        except (SyntaxError, ValueError):
            _trees[path] = None
    return _trees[path]


def enclosing_loops(tree: ast.AST, line: int) -> list[ast.For]:
    """The ``for`` statements whose body holds ``line``, innermost first, within the innermost
    function (or class, or the module) that holds it: a loop outside that function runs in
    another frame."""
    found: list[ast.For] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            start, end = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
            if start is None or end is None or not start <= line <= end:
                continue
            if isinstance(child, _SCOPES):
                found.clear()  # a def holding the line: its own frame's loops start here
            elif isinstance(child, ast.For) and any(s.lineno <= line <= (s.end_lineno or s.lineno) for s in child.body):
                found.append(child)
            visit(child)

    visit(tree)
    return found[::-1]


def _value(node: ast.expr, scopes: Sequence[Mapping[str, Any]]) -> Any:
    """``node`` read as plain data from ``scopes`` (innermost first), running none of the
    script's code; :data:`_UNREAD` where it is anything else."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return next((scope[node.id] for scope in scopes if node.id in scope), _UNREAD)
    if isinstance(node, ast.Attribute):
        base = _value(node.value, scopes)
        if base is _UNREAD:
            return _UNREAD
        try:
            found = inspect.getattr_static(base, node.attr)
        except AttributeError:
            return _UNREAD
        # A descriptor (a property, a method) would run code to give its value: not read.
        return _UNREAD if hasattr(type(found), "__get__") else found
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        base = _value(node.value, scopes)
        return base.get(node.slice.value, _UNREAD) if isinstance(base, dict) else _UNREAD
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _value(node.left, scopes), _value(node.right, scopes)
        if _whole(left) and _whole(right) and not (isinstance(node.op, ast.FloorDiv) and right == 0):
            return _OPERATORS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and _whole(_value(node.operand, scopes)):
        return -_value(node.operand, scopes)
    return _UNREAD


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _range_length(loop: ast.For, scopes: Sequence[Mapping[str, Any]]) -> int | None:
    """How many times ``loop`` runs when it is ``for ... in range(...)`` with bounds read as
    plain whole numbers; None otherwise."""
    call = loop.iter
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "range"
            and 1 <= len(call.args) <= 3 and not call.keywords):
        return None
    if _value(call.func, scopes) not in (_UNREAD, range):
        return None  # a "range" of the script's own: the builtin is in none of its scopes
    bounds = [_value(arg, scopes) for arg in call.args]
    if not all(_whole(b) for b in bounds) or (len(bounds) == 3 and bounds[2] == 0):
        return None
    return len(range(*bounds))


def _names_a_loader(expression: ast.expr, scopes: Sequence[Mapping[str, Any]]) -> bool:
    """Some name or attribute in ``expression`` holds a DataLoader (read as :func:`_value` reads)."""
    return any(isinstance(node, (ast.Name, ast.Attribute)) and isinstance(_value(node, scopes), DataLoader)
               for node in ast.walk(expression))


def _script_loops(frame: types.FrameType | None, max_depth: int) -> list[tuple[ast.For, list[Mapping[str, Any]]]]:
    """The ``for`` statements around each script frame's current line, innermost first, frame
    by frame outwards, each with its frame's scopes."""
    found: list[tuple[ast.For, list[Mapping[str, Any]]]] = []
    for _ in range(max_depth):
        if frame is None:
            break
        tree = _tree(frame.f_code.co_filename) if frames.is_script_frame(frame) else None
        loops = enclosing_loops(tree, frame.f_lineno) if tree is not None and frame.f_lineno else []
        if loops:
            scopes = frames.script_names(frame)
            found += [(loop, scopes) for loop in loops]
        frame = frame.f_back
    return found


def loop_epochs(frame: types.FrameType | None = None, max_depth: int = 64) -> tuple[str, int] | None:
    """(the loops in words, the epochs) of the ``range`` loops around the script's loop over a
    DataLoader, from ``frame`` (the caller's) outwards: ``("loop for epoch in range(3)", 3)``;
    None when no loop over a DataLoader is on the stack, or nothing around it is read as a
    count. Reads only (the module docstring says what)."""
    loops = _script_loops(frame or sys._getframe(1), max_depth)
    batch = next((i for i, (loop, scopes) in enumerate(loops) if _names_a_loader(loop.iter, scopes)), None)
    if batch is None:
        return None
    counted: list[tuple[ast.For, int]] = []
    for loop, scopes in loops[batch + 1:]:
        length = _range_length(loop, scopes)
        if length is None:
            break
        counted.append((loop, length))
    if not counted or math.prod(n for _, n in counted) < 1:
        return None
    epochs = math.prod(n for _, n in counted)
    words = "loop " + ", ".join(f"for {ast.unparse(loop.target)} in {ast.unparse(loop.iter)}"
                                for loop, _ in counted[::-1])
    args = counted[0][0].iter.args if len(counted) == 1 else []  # type: ignore[attr-defined]
    said = len(args) == 1 and isinstance(args[0], ast.Constant)  # range(3) says its count itself
    return (words if said else f"{words} = {epochs}"), epochs
