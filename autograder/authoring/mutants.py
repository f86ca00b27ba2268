"""Mutation testing of the reference solutions: do the tests catch small wrong changes of them?

A harness for course authors, not a grading stage. For every graded task (an
autograded answer cell of ``source/<id>/<id>.ipynb`` and the autograder-tests
cells after it) :func:`mutate` derives mutants of the reference solution from
its syntax tree (the operators of :data:`OPERATORS`, applied one at a time to
the lines between the solution markers), and :func:`run` executes each mutant
against the task's test cells, visible and hidden tests alike.

Why not mutmut or cosmic-ray: both mutate files of a package and judge a
mutant by the exit code of a test command run afresh per mutant. Here the code
under test is a notebook cell whose tests need the notebook's earlier cells
(torch imported, data built, a kernel's state): a fresh process per mutant costs
seconds before the first test runs, neither tool mutates dims, dtypes or
in-place methods, and neither could judge a mutant as the grader does (by its
check records, :mod:`autograder.pipeline.verdict`).

How a mutant is run: one Python process per assignment (in a scratch folder
holding ``checks.py``, with the reference kernels' environment,
:data:`autograder.pipeline.reference.REFERENCE_ENV`, so ``COURSE_DEVICE=cpu``) executes the
notebook's cells in order; at each task it forks once for the unchanged
solution (the task's reference records and time) and once per mutant, each
child executing the (mutant) solution cell and then the task's test cells.
A mutant is **killed** when a test cell raises, writes to stderr (nbgrader
scores such a cell 0), or ends its process, runs past its time limit, or when
its check records fail against the unchanged solution's under the grader's
rule (:func:`autograder.pipeline.verdict.first_mismatch`; the table counts those
apart, as "by the verdict": the test passed in the kernel, the grader fails
it). A mutant that is not killed **survives**; it is **equivalent** when
``mutants_equivalent.json`` (beside this module) lists its id for its task,
with the reason it obeys the task's contract.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..course import (
    CHECKS_MODULE,
    ROOT,
    Course,
    CourseError,
    grade_id,
    is_autograded_answer,
    is_autograder_tests,
    raises_on_purpose,
    read_notebook,
    regions,
    strip_markers,
)

EQUIVALENT_FILE = Path(__file__).resolve().parent / "mutants_equivalent.json"
"""The reviewed equivalent mutants: ``{solution grade_id: {mutant id: reason}}``."""

MIN_TIMEOUT_S = 10.0
TIMEOUT_FACTOR = 20.0
"""A mutant's time limit: this many times the unchanged solution's time for the task, at least MIN_TIMEOUT_S."""

OPERATORS = (
    "arithmetic",
    "comparison",
    "boolean",
    "not",
    "negation",
    "constant",
    "dtype",
    "in-place",
    "method",
    "unwrap call",
    "drop keyword",
    "swap arguments",
    "return input",
    "remove statement",
)
"""What a mutant changes, one thing each (its id starts with the operator's name):

- ``arithmetic``: ``+ <-> -``, ``* <-> /``, ``// -> /``, ``% -> //``, ``** -> *``, ``@ -> *``;
- ``comparison``: ``< <-> <=``, ``> <-> >=``, ``< <-> >``, ``== <-> !=``, ``is <-> is not``, ``in <-> not in``;
- ``boolean``: ``and <-> or``; ``not``: ``not x -> x``; ``negation``: ``-x -> x`` (so ``dim=-1 -> dim=1``);
- ``constant``: an int ``n -> n + 1`` and ``n - 1`` (dims, axes, off-by-one), ``True <-> False`` (``keepdim``),
  a float ``c -> 0.0`` (``1.0`` for zero) and ``c + 1.0``;
- ``dtype``: ``torch.float32 <-> torch.float64``, ``float16``/``bfloat16 -> float32``, ``int64 <-> int32``;
- ``in-place``: ``x.add_(y) -> x.add(y)`` and ``x.add(y) -> x.add_(y)`` (methods of :data:`IN_PLACE`);
- ``method``: a method or function for its usual confusion (:data:`METHOD_SWAPS`: ``view <-> reshape``, ...);
- ``unwrap call``: ``x.m() -> x`` for a method called without arguments (``contiguous``, ``clone``, ``detach``...);
- ``drop keyword``: a call without one of its keyword arguments (``dtype=``, ``device=``, ``dim=``, ...);
- ``swap arguments``: two neighbouring positional arguments of a call exchanged;
- ``return input``: ``return expr -> return p`` for each parameter ``p`` of the enclosing function;
- ``remove statement``: a statement replaced by ``pass`` (a guard's ``if`` or ``raise`` too).
"""

_ARITHMETIC = {
    ast.Add: (ast.Sub,),
    ast.Sub: (ast.Add,),
    ast.Mult: (ast.Div,),
    ast.Div: (ast.Mult,),
    ast.FloorDiv: (ast.Div,),
    ast.Mod: (ast.FloorDiv,),
    ast.Pow: (ast.Mult,),
    ast.MatMult: (ast.Mult,),
}
_COMPARISON = {
    ast.Lt: (ast.LtE, ast.Gt),
    ast.LtE: (ast.Lt,),
    ast.Gt: (ast.GtE, ast.Lt),
    ast.GtE: (ast.Gt,),
    ast.Eq: (ast.NotEq,),
    ast.NotEq: (ast.Eq,),
    ast.Is: (ast.IsNot,),
    ast.IsNot: (ast.Is,),
    ast.In: (ast.NotIn,),
    ast.NotIn: (ast.In,),
}
_BOOLEAN = {ast.And: ast.Or, ast.Or: ast.And}
DTYPE_SWAPS = {
    "float32": ("float64",),
    "float": ("double",),
    "float64": ("float32",),
    "double": ("float",),
    "float16": ("float32",),
    "half": ("float",),
    "bfloat16": ("float32",),
    "int64": ("int32",),
    "long": ("int",),
    "int32": ("int64",),
}
"""``torch.<dtype>`` attribute -> the dtypes a mutant puts in its place."""
IN_PLACE = frozenset(
    "add sub mul div neg abs clamp clamp_min clamp_max masked_fill fill zero copy index_put index_add "
    "scatter scatter_add addmm addmv pow sqrt exp log sigmoid tanh relu t transpose squeeze unsqueeze "
    "mul_add lerp where".split()
)
"""Out-of-place tensor methods whose in-place twin (``name_``) a mutant calls instead."""
METHOD_SWAPS = {
    "view": ("reshape",),
    "reshape": ("view",),
    "sum": ("mean",),
    "mean": ("sum",),
    "max": ("min",),
    "min": ("max",),
    "amax": ("amin",),
    "amin": ("amax",),
    "argmax": ("argmin",),
    "argmin": ("argmax",),
    "zeros": ("ones",),
    "ones": ("zeros",),
    "zeros_like": ("ones_like",),
    "ones_like": ("zeros_like",),
    "permute": ("reshape",),
    "transpose": ("swapaxes",),
    "matmul": ("mul",),
    "mm": ("mul",),
    "expand": ("repeat",),
    "repeat": ("expand",),
    "clone": ("detach",),
    "detach": ("clone",),
    "contiguous": ("clone",),
    "no_grad": ("enable_grad",),
    "synchronize": ("current_device",),
    "item": ("tolist",),
    "tolist": ("numpy",),
    "floor": ("ceil", "round"),
    "ceil": ("floor",),
    "round": ("floor",),
    "randperm": ("arange",),
    "allclose": ("equal",),
}
"""Method or function name (``x.view``, ``torch.zeros``) -> the names of its usual confusions. Never ``empty``:
what uninitialised memory holds changes from run to run, and so would such a mutant's fate."""


@dataclass(frozen=True)
class Mutant:
    """One change of a solution cell's code."""

    id: str
    """Stable within its task whatever the docstring or line numbers: ``operator: before -> after`` (``#n`` added
    for the n-th same change), e.g. ``comparison: height > full_height -> height >= full_height``."""
    operator: str
    source: str
    """The whole mutated cell, as ``ast.unparse`` writes it."""


def solution_lines(source: str) -> set[int]:
    """Line numbers (1-based) of ``strip_markers(source)`` that lay between the solution markers of ``source``."""
    return {number for number, (region, _) in enumerate(regions(source), start=1) if region == "solution"}


def mutate(source: str) -> list[Mutant]:
    """Every mutant of a solution cell (its source with markers): one :data:`OPERATORS` change each, applied to code
    between the solution markers, never inside an f-string (a message); mutants identical to the cell or to an earlier mutant, and mutants that do not
    compile, left out. In the order of the syntax tree (``ast.walk``).

    Raises:
        SyntaxError: the cell (without markers) is not Python.
    """
    code = strip_markers(source)
    tree = ast.parse(code)
    lines = solution_lines(source)
    original = ast.unparse(tree)
    seen, found, counts = {original}, [], {}
    for path, operator, replacement in _sites(tree, lines):
        mutated = copy.deepcopy(tree)
        _replace(mutated, path, copy.deepcopy(replacement))
        text = ast.unparse(ast.fix_missing_locations(mutated))
        if text in seen:
            continue
        try:
            compile(text, "<mutant>", "exec")
        except SyntaxError:
            continue
        seen.add(text)
        shown = _shown(path, tree, mutated)
        if shown is None:
            before, after = _short(_child(tree, path)), "pass" if isinstance(replacement, ast.Pass) else _short(replacement)
        else:
            before, after = shown
        name = f"{operator}: {before} -> {after}"
        counts[name] = counts.get(name, 0) + 1
        found.append(Mutant(id=name if counts[name] == 1 else f"{name} #{counts[name]}", operator=operator, source=text))
    return found


def _short(node: ast.AST) -> str:
    text = ast.unparse(node).splitlines()[0]
    return text if len(text) <= 100 else text[:97] + "..."


Site = tuple[int, str, int | None]
"""Where a child node is: (its parent's index in ``ast.walk`` order, the parent's field, the index in that list)."""


def _parent(tree: ast.AST, path: Site) -> ast.AST:
    return next(node for index, node in enumerate(ast.walk(tree)) if index == path[0])


def _child(tree: ast.AST, path: Site) -> ast.AST:
    value = getattr(_parent(tree, path), path[1])
    return value if path[2] is None else value[path[2]]


def _replace(tree: ast.AST, path: Site, replacement: ast.AST) -> None:
    """Put ``replacement`` at ``path`` of ``tree`` (in place)."""
    parent = _parent(tree, path)
    if path[2] is None:
        setattr(parent, path[1], replacement)
    else:
        getattr(parent, path[1])[path[2]] = replacement


def _shown(path: Site, tree: ast.AST, mutated: ast.AST) -> tuple[str, str] | None:
    """A small change (a constant, a name, an attribute, a sign) is shown in the expression around it, so that the
    id says where it is (``labels.numel() > 0 -> labels.numel() > 1``, not ``0 -> 1``); None for the others."""
    if not isinstance(_child(tree, path), _SMALL):
        return None
    parents = {id(child): index for index, node in enumerate(ast.walk(tree)) for child in ast.iter_child_nodes(node)}
    nodes = list(ast.walk(tree))
    index = path[0]
    while isinstance(nodes[index], _SMALL) and id(nodes[index]) in parents:
        index = parents[id(nodes[index])]  # an ancestor comes before its descendants in ast.walk's order
    if not isinstance(nodes[index], ast.expr):
        return None
    return _short(nodes[index]), _short(list(ast.walk(mutated))[index])


_SMALL = (ast.Constant, ast.Name, ast.Attribute, ast.UnaryOp, ast.keyword)


def _sites(tree: ast.AST, lines: set[int]) -> Iterator[tuple[Site, str, ast.AST]]:
    """``(path to a child, operator, its replacement)`` for every mutation of ``tree``."""
    parameters = _parameters(tree)
    messages = {id(node) for text in ast.walk(tree) if isinstance(text, ast.JoinedStr) for node in ast.walk(text)}
    for parent_index, parent in enumerate(ast.walk(tree)):
        if id(parent) in messages:  # an f-string: a message, which no contract fixes
            continue
        for name, value in ast.iter_fields(parent):
            if name in ("annotation", "returns", "decorator_list", "type_comment"):
                continue
            children = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
            for position, child in children:
                if not isinstance(child, ast.AST) or getattr(child, "lineno", None) not in lines:
                    continue
                for operator, replacement in _replacements(child, in_list=position is not None, parameters=parameters):
                    yield (parent_index, name, position), operator, replacement


def _parameters(tree: ast.AST) -> dict[int, list[str]]:
    """``id(return statement) -> parameter names of the innermost function holding it``."""
    found: dict[int, list[str]] = {}
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = function.args
            names = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
            for node in ast.walk(function):
                if isinstance(node, ast.Return):
                    found[id(node)] = names
    return found


def _with(node: ast.AST, **changes: Any) -> ast.AST:
    changed = copy.deepcopy(node)
    for name, value in changes.items():
        setattr(changed, name, value)
    return changed


def _replacements(node: ast.AST, *, in_list: bool, parameters: dict[int, list[str]]) -> Iterator[tuple[str, ast.AST]]:
    """``(operator, replacement)`` for each mutation of ``node`` itself (not of its children)."""
    if isinstance(node, (ast.BinOp, ast.AugAssign)):
        for op in _ARITHMETIC.get(type(node.op), ()):
            yield "arithmetic", _with(node, op=op())
    elif isinstance(node, ast.Compare):
        for index, op in enumerate(node.ops):
            for other in _COMPARISON.get(type(op), ()):
                yield "comparison", _with(node, ops=[*node.ops[:index], other(), *node.ops[index + 1 :]])
    elif isinstance(node, ast.BoolOp):
        yield "boolean", _with(node, op=_BOOLEAN[type(node.op)]())
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "not", copy.deepcopy(node.operand)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        yield "negation", copy.deepcopy(node.operand)
    elif isinstance(node, ast.Constant) and type(node.value) in (bool, int, float):
        yield from (("constant", ast.Constant(value=value)) for value in _constants(node.value))
    elif isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "torch":
            for dtype in DTYPE_SWAPS.get(node.attr, ()):
                yield "dtype", _with(node, attr=dtype)
    elif isinstance(node, ast.Call):
        yield from _call_replacements(node)
    elif isinstance(node, ast.Return) and node.value is not None:
        for name in parameters.get(id(node), []):
            if not (isinstance(node.value, ast.Name) and node.value.id == name):
                yield "return input", _with(node, value=ast.Name(id=name, ctx=ast.Load()))
    if in_list and isinstance(node, ast.stmt) and not _is_docstring(node) and not isinstance(
        node, (ast.Pass, ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
    ):
        yield "remove statement", ast.Pass()


def _constants(value: bool | int | float) -> list[bool | int | float]:
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value - 1]
    return [0.0 if value else 1.0, value + 1.0]


def _call_replacements(node: ast.Call) -> Iterator[tuple[str, ast.AST]]:
    function = node.func
    name = function.attr if isinstance(function, ast.Attribute) else function.id if isinstance(function, ast.Name) else None
    if isinstance(function, ast.Attribute) and name:
        if name.endswith("_") and not name.startswith("_"):
            yield "in-place", _with(node, func=_with(function, attr=name[:-1]))
        elif name in IN_PLACE:
            yield "in-place", _with(node, func=_with(function, attr=name + "_"))
        if not node.args and not node.keywords:
            yield "unwrap call", copy.deepcopy(function.value)
    for other in METHOD_SWAPS.get(name or "", ()):
        renamed = _with(function, attr=other) if isinstance(function, ast.Attribute) else ast.Name(id=other, ctx=ast.Load())
        yield "method", _with(node, func=renamed)
    for index, keyword in enumerate(node.keywords):
        if keyword.arg is not None:
            yield "drop keyword", _with(node, keywords=[*node.keywords[:index], *node.keywords[index + 1 :]])
    for index in range(len(node.args) - 1):
        first, second = node.args[index], node.args[index + 1]
        if not isinstance(first, ast.Starred) and not isinstance(second, ast.Starred):
            if ast.dump(first) != ast.dump(second):
                swapped = [*node.args[:index], second, first, *node.args[index + 2 :]]
                yield "swap arguments", _with(node, args=swapped)


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


# --------------------------------------------------------------------------- running


@dataclass
class Outcome:
    """What became of one mutant: ``status`` is ``killed``, ``killed by the verdict``, ``survived`` or
    ``equivalent``; ``why``: the first failure (killed), or the reviewed reason (equivalent)."""

    mutant: Mutant
    status: str
    why: str = ""


@dataclass
class TaskResult:
    """The mutants of one task and what became of each."""

    assignment_id: str
    task: str
    """The solution cell's grade_id."""
    tests: list[str]
    """The grade_ids of the task's autograder-tests cells."""
    outcomes: list[Outcome] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    """Ids the equivalent list names for this task that are no mutant of it any more, or that the tests kill."""

    def count(self, *statuses: str) -> int:
        return sum(outcome.status in statuses for outcome in self.outcomes)

    @property
    def survivors(self) -> list[Outcome]:
        return [outcome for outcome in self.outcomes if outcome.status == "survived"]


def equivalent_mutants(path: Path = EQUIVALENT_FILE) -> dict[str, dict[str, str]]:
    """The reviewed equivalent mutants, ``{solution grade_id: {mutant id: reason}}`` (empty if the file is missing).

    Raises:
        CourseError: the file is not JSON of that shape.
    """
    if not path.is_file():
        return {}
    try:
        listed = json.loads(path.read_text())
    except ValueError as error:
        raise CourseError(f"{path} is not JSON: {error}") from error
    if not isinstance(listed, dict) or not all(
        isinstance(v, dict) and all(isinstance(r, str) and r.strip() for r in v.values()) for v in listed.values()
    ):
        raise CourseError(f"{path} must map solution grade_ids to {{mutant id: reason}}, every reason given")
    return listed


def tasks(course: Course, assignment_id: str) -> list[tuple[int, list[int]]]:
    """``(index of an autograded answer cell, indices of the autograder-tests cells after it)`` for each graded task
    of the source notebook, in order (the tests run up to the next answer cell; an answer with none is left out)."""
    notebook = read_notebook(course.source_notebook(assignment_id))
    found: list[tuple[int, list[int]]] = []
    for index, cell in enumerate(notebook.cells):
        if is_autograded_answer(cell):
            found.append((index, []))
        elif is_autograder_tests(cell) and found:
            found[-1][1].append(index)
    return [(answer, tests) for answer, tests in found if tests]


def run(
    course: Course,
    *,
    selection: list[str] | None = None,
    equivalent: dict[str, dict[str, str]] | None = None,
) -> list[TaskResult]:
    """Run every mutant of every task chosen and judge it (see the module's docstring).

    ``selection``: assignment ids, solution grade_ids or their test cells' grade_ids (default: every
    assignment); ``equivalent``: the reviewed list (default: :func:`equivalent_mutants`). Returns one :class:`TaskResult` per task, in course order.

    Raises:
        CourseError: a selection names nothing of the course, or the unchanged notebook fails in the harness.
    """
    from ..pipeline.reference import REFERENCE_ENV

    equivalent = equivalent_mutants() if equivalent is None else equivalent
    known = course.assignment_ids()
    wanted: dict[str, set[str] | None] = {}
    for name in selection or known:
        if name in known:
            wanted[name] = None
            continue
        owner, solution = next(
            ((a, names[name]) for a in known if name in (names := _task_names(course, a))), (None, None)
        )
        if owner is None:
            raise CourseError(
                f"{name} is neither an assignment of the course nor the grade_id of a graded answer or of its tests"
            )
        if wanted.get(owner, set()) is not None:
            wanted[owner] = {*wanted.get(owner, set()), solution}
    results: list[TaskResult] = []
    for assignment_id in [a for a in known if a in wanted]:
        results += _run_assignment(course, assignment_id, wanted[assignment_id], equivalent, env=REFERENCE_ENV)
    return results


def _task_names(course: Course, assignment_id: str) -> dict[str, str]:
    """The solution grade_id of each graded task, by that grade_id and by each of its test cells' (the id that
    grades.csv and the results show)."""
    cells = read_notebook(course.source_notebook(assignment_id)).cells
    return {
        grade_id(cells[index]): grade_id(cells[answer])
        for answer, tests in tasks(course, assignment_id)
        for index in (answer, *tests)
    }


def _run_assignment(
    course: Course,
    assignment_id: str,
    wanted: set[str] | None,
    equivalent: dict[str, dict[str, str]],
    *,
    env: dict[str, str],
) -> list[TaskResult]:
    from ..pipeline.verdict import first_mismatch

    notebook = read_notebook(course.source_notebook(assignment_id))
    plan_tasks, results = {}, []
    for answer, tests in tasks(course, assignment_id):
        task = grade_id(notebook.cells[answer])
        if wanted is not None and task not in wanted:
            continue
        found = mutate(notebook.cells[answer].source)
        plan_tasks[str(answer)] = {"tests": tests, "mutants": [m.source for m in found]}
        results.append(TaskResult(assignment_id, task, [grade_id(notebook.cells[t]) for t in tests]))
        results[-1].outcomes = [Outcome(m, "") for m in found]
    cells = [
        {"source": strip_markers(cell.source), "raises": raises_on_purpose(cell)} if cell.cell_type == "code" else None
        for cell in notebook.cells
    ]
    with tempfile.TemporaryDirectory(prefix=f"mutants-{assignment_id}-") as scratch:
        shutil.copy(CHECKS_MODULE, Path(scratch) / "checks.py")
        plan, answers = Path(scratch) / "plan.json", Path(scratch) / "answers.json"
        plan.write_text(json.dumps({"cells": cells, "tasks": plan_tasks}))
        environment = {
            **os.environ,
            **env,
            "NBGRADER_EXECUTION": "autograde",
            "MPLBACKEND": "Agg",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        code = f"from autograder.authoring.mutants import worker; worker({str(plan)!r}, {str(answers)!r})"
        command = [sys.executable, "-c", code]
        process = subprocess.run(command, cwd=scratch, env=environment, capture_output=True, text=True, check=False)
        if process.returncode != 0:
            raise CourseError(f"mutants of {assignment_id}: the harness failed:\n{process.stdout}{process.stderr}")
        answered = json.loads(answers.read_text())
    for result, answer in zip(results, plan_tasks):
        reference, children = answered[answer]["reference"], answered[answer]["mutants"]
        if reference["error"]:
            raise CourseError(f"{result.task}: the unchanged solution fails its own tests: {reference['error']}")
        listed = equivalent.get(result.task, {})
        for outcome, child in zip(result.outcomes, children):
            outcome.status, outcome.why = _judge(child, reference, first_mismatch)
            if outcome.mutant.id in listed:
                if outcome.status == "survived":
                    outcome.status, outcome.why = "equivalent", listed[outcome.mutant.id]
                else:
                    result.stale.append(f"{outcome.mutant.id} (listed as equivalent, but {outcome.status})")
        ids = {outcome.mutant.id for outcome in result.outcomes}
        result.stale += [f"{name} (listed as equivalent, no such mutant)" for name in listed if name not in ids]
    return results


def _judge(child: dict[str, Any], reference: dict[str, Any], first_mismatch: Any) -> tuple[str, str]:
    if child["error"]:
        return "killed", child["error"]
    for name, (records, expected) in enumerate(zip(child["records"], reference["records"])):
        problem = first_mismatch(records, expected)
        if problem is not None:
            return "killed by the verdict", f"test cell {name + 1}: {problem}"
    return "survived", ""


def worker(plan_path: str, answers_path: str) -> None:
    """The harness process (run by :func:`run` with the reference environment, in a scratch folder holding
    ``checks.py``): execute the plan's cells in order; at each task fork the unchanged solution and each mutant
    (:func:`_in_child`); write ``{answer index: {"reference": answer, "mutants": [answer, ...]}}`` to ``answers_path``.
    An answer is ``{"error": why or "", "records": [records of each test cell], "seconds": float}``.

    Raises:
        RuntimeError: a cell of the unchanged notebook raised where it is not tagged to.
    """
    plan = json.loads(Path(plan_path).read_text())
    namespace: dict[str, Any] = {"__name__": "__main__"}
    answers: dict[str, Any] = {}
    for index, cell in enumerate(plan["cells"]):
        if cell is None:
            continue
        task = plan["tasks"].get(str(index))
        if task is not None:
            tests = [plan["cells"][t]["source"] for t in task["tests"]]
            reference = _fork(namespace, cell["source"], tests, timeout=None)
            limit = max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * reference["seconds"])
            answers[str(index)] = {
                "reference": reference,
                "mutants": [_fork(namespace, source, tests, timeout=limit) for source in task["mutants"]],
            }
        try:
            exec(compile(cell["source"], f"<cell {index}>", "exec"), namespace)
        except Exception as error:
            if not cell["raises"]:
                raise RuntimeError(f"cell {index} raised {type(error).__name__}: {error}") from error
    Path(answers_path).write_text(json.dumps(answers))


def _fork(namespace: dict[str, Any], solution: str, tests: list[str], *, timeout: float | None) -> dict[str, Any]:
    """Run ``solution`` then ``tests`` in a forked copy of this process and ``namespace``; the child's answer."""
    read_end, write_end = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            answer = json.dumps(_in_child(namespace, solution, tests)).encode()
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(answer)
        finally:
            os._exit(0)
    os.close(write_end)
    chunks, deadline = [], None if timeout is None else started + timeout
    while True:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([read_end], [], [], wait)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_end)
            return {"error": f"ran past its time limit ({timeout:.0f} s)", "records": [], "seconds": timeout}
        chunk = os.read(read_end, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    seconds = time.monotonic() - started
    if not chunks:
        return {"error": f"its process ended (wait status {status})", "records": [], "seconds": seconds}
    return {**json.loads(b"".join(chunks)), "seconds": seconds}


def _in_child(namespace: dict[str, Any], solution: str, tests: list[str]) -> dict[str, Any]:
    """In the forked child: the solution and each test cell executed, stdout discarded, stderr and errors caught."""
    import io

    import checks  # the scratch folder's copy, which the notebook imported

    sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
    records: list[list[Any]] = []
    try:
        exec(compile(solution, "<solution>", "exec"), namespace)
        for number, test in enumerate(tests, start=1):
            start = len(checks.records)
            exec(compile(test, f"<test cell {number}>", "exec"), namespace)
            records.append(json.loads(json.dumps(checks.records[start:])))
            if sys.stderr.getvalue():
                return {"error": f"test cell {number} wrote to stderr: {sys.stderr.getvalue()[:200]!r}", "records": records}
    except BaseException as error:  # a mutant may raise anything, SystemExit and KeyboardInterrupt included
        message = str(error).splitlines()[0] if str(error) else ""
        return {"error": f"{type(error).__name__}: {message[:200]}", "records": records}
    return {"error": "", "records": records}


# --------------------------------------------------------------------------- report


_COLUMNS = (
    ("killed", "killed by the verdict", "survived", "equivalent"),
    ("killed", "killed by the verdict"),
    ("killed by the verdict",),
    ("survived",),
    ("equivalent",),
)
"""The statuses each number column of :func:`table` counts (after the task's name)."""


def table(results: list[TaskResult]) -> str:
    """The mutation table: one row per task, totals per assignment and overall, then each survivor and stale entry."""
    header = ("task", "mutants", "killed", "by verdict", "survived", "equivalent")
    rows: list[tuple[str, ...]] = [header]

    def row(name: str, group: list[TaskResult]) -> tuple[str, ...]:
        counts = [sum(r.count(*statuses) for r in group) for statuses in _COLUMNS]
        return (name, *map(str, counts))

    for assignment_id in dict.fromkeys(r.assignment_id for r in results):
        group = [r for r in results if r.assignment_id == assignment_id]
        rows += [row(f"  {r.task}", [r]) for r in group]
        rows.append(row(f"{assignment_id} (total)", group))
    rows.append(row("all", results))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for result in results:
        lines += [f"SURVIVED {result.task}: {o.mutant.id}" for o in result.survivors]
        lines += [f"STALE {result.task}: {entry}" for entry in result.stale]
    return "\n".join(lines)
