"""Stage ``check``: is the course consistent? Lists findings; no findings means it is.

Findings: release/ or notebooks/ stale against source/ (compared ignoring
cell ids, outputs and execution metadata), a release notebook holding
solution code, hidden tests or their markers, a reference notebook not fully
executed or with stderr, a grade cell without points, repeated grade_ids (found
in the source, before nbgrader refuses it), grade_ids not derived from their
task's heading or made up by JupyterLab, a test cell ending in a bare
expression, an opening whose task count or points disagree with the grade
cells, a solution code cell with no autograder-tests cell after it, a solution or
autograder-tests cell without its BEGIN SOLUTION / BEGIN HIDDEN TESTS markers,
a hidden test that hands the kernel an expected value (:func:`hidden_oracle_findings`),
a cell that raises on purpose without the ``raises-exception`` tag
(JupyterLab's Run All, like nbgrader, stops at the first error of an untagged cell), and a bundle for students
(``python -m autograder release``, built in a throwaway folder) that would be refused.

Findings name a cell as its author finds it: by grade_id where it has one, the task heading it lies under, and
``cell N`` counted from 1 at the top of the notebook (:func:`autograder.course.cell_number`). A finding that ``build``
fixes says "run build"; where nbgrader refuses the source (``build`` would refuse too), none says so.
"""

from __future__ import annotations

import ast
import filecmp
import itertools
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import nbformat
from IPython.core.inputtransformer2 import TransformerManager

from ..kernel import checks
from .build import release_generator
from .bundle import release
from .leaks import leaked, secret_lines
from ..kernel.checks import RECORD_VERSION
from ..course import (
    CHECKS_MODULE,
    HIDDEN_TEST_MARKERS,
    RAISES_TAG,
    SOLUTION_MARKERS,
    Course,
    CourseError,
    TaskHeading,
    cell_number,
    grade_id,
    is_autograded_answer,
    is_autograder_tests,
    is_grade,
    nbgrader_meta,
    raises_on_purpose,
    read_notebook,
    task_headings,
)
from ..pipeline.reference import NBVAL_RAISES, marked, reference_cells
from ..pipeline.verdict import cell_records, is_group_end


def check(course: Course, *, assignment_ids: list[str] | None = None) -> list[str]:
    """Return the findings for the given assignments of ``course`` (default: all; empty when all is well).

    The source notebook's own findings come first, before nbgrader runs on it. One nbgrader process generates
    every assignment's release, into one throwaway gradebook (:func:`autograder.authoring.build.release_generator`).

    Raises:
        CourseError: an id is not an assignment of the course.
    """
    findings = []
    chosen = course.chosen(assignment_ids)
    with release_generator(course) as generate:
        for assignment_id in chosen:
            source = read_notebook(course.source_notebook(assignment_id))
            findings += [f"source/{assignment_id}: {f}" for f in source_findings(source)]
            with tempfile.TemporaryDirectory(prefix="release-check-") as scratch:
                try:
                    fresh, fix = generate(assignment_id, Path(scratch)), RUN_BUILD
                except CourseError as error:  # the cause is quoted; the source findings above name it too, mostly
                    findings.append(f"release/{assignment_id}: not compared: {error}")
                    fresh, fix = None, BUILD_REFUSES
                findings += release_findings(course, assignment_id, source, fresh=fresh, fix=fix)
            findings += bundle_check(course, assignment_id)
            findings += reference_findings(course, assignment_id, fix=fix)
    return findings


RUN_BUILD = "run `python -m autograder build`"
BUILD_REFUSES = "build refuses this source until the findings above are fixed"
"""What a stale or missing file's finding says to do, as nbgrader took the source or refused it."""


def bundle_check(course: Course, assignment_id: str) -> list[str]:
    """The findings of the assignment's bundle for students (:func:`autograder.authoring.bundle.bundle_findings`),
    built as ``python -m autograder release`` builds it, in a throwaway folder (none while release/ lacks the
    assignment: :func:`release_findings` says so)."""
    if not course.release_notebook(assignment_id).exists():
        return []
    with tempfile.TemporaryDirectory(prefix="bundle-check-") as scratch:
        try:
            bundle = release(course, assignment_ids=[assignment_id], output=Path(scratch))[0]
        except CourseError as error:
            return [f"bundle {assignment_id}.zip: not built: {error}"]
    return [f"bundle {assignment_id}.zip: {finding}" for finding in bundle.findings]


def _place(index: int, task: TaskHeading | None) -> str:
    """``cell N`` (from 1) and, in a task, its heading: where an author finds the cell at ``index``."""
    return cell_number(index) + (f", under {task.title!r}" if task else "")


def source_findings(notebook: nbformat.NotebookNode) -> list[str]:
    """The source notebook's findings: those of its cells (:func:`cell_findings`), then its
    grade_ids (:func:`grade_id_findings`) and its opening's counts (:func:`stated_count_findings`)."""
    return cell_findings(notebook) + grade_id_findings(notebook) + stated_count_findings(notebook)


def cell_findings(notebook: nbformat.NotebookNode) -> list[str]:
    """Grade cells without points, repeated grade_ids, solution cells with no tests after them,
    cells whose solution or hidden tests are not marked (nbgrader would then release them),
    hidden tests that hand the kernel an expected value (:func:`hidden_oracle_findings`),
    test cells that end in a bare expression, and cells whose ``# NBVAL_RAISES_EXCEPTION``
    marker and ``raises-exception`` tag disagree."""
    findings = []
    silent = SILENT_CALLS | returning_nothing(notebook)
    seen: dict[str, int] = {}
    for index, (cell, task) in enumerate(zip(notebook.cells, task_headings(notebook))):
        cell_id, place = grade_id(cell), _place(index, task)
        if cell_id is not None:
            if cell_id in seen:
                first = cell_number(seen[cell_id])
                findings.append(f"grade_id {cell_id!r} is used by {first} and {place}: nbgrader refuses it")
            seen.setdefault(cell_id, index)
        if is_grade(cell):
            points = cell.metadata["nbgrader"].get("points")
            if not isinstance(points, (int, float)) or points <= 0:
                findings.append(f"grade cell {cell_id!r} ({place}) has no points")
        if is_autograder_tests(cell) and HIDDEN_TEST_MARKERS[0] not in cell.source:
            findings.append(f"autograder-tests cell {cell_id!r} ({place}) has no {HIDDEN_TEST_MARKERS[0]} section")
        if is_autograder_tests(cell):
            findings += [
                f"autograder-tests cell {cell_id!r} ({place}), line {line}: {problem}"
                for line, problem in hidden_oracle_findings(cell.source)
            ]
        if is_autograder_tests(cell) and (last := bare_expression(cell.source, silent=silent)):
            findings.append(
                f"autograder-tests cell {cell_id!r} ({place}) ends in the bare expression {last!r}: nbgrader "
                "reads a number shown as the cell's value as partial credit (assign it, or end with a check)"
            )
        if is_autograded_answer(cell) and SOLUTION_MARKERS[0] not in cell.source:
            findings.append(f"solution cell {cell_id!r} ({place}) has no {SOLUTION_MARKERS[0]} region")
        if is_autograded_answer(cell):
            following = next((c for c in notebook.cells[index + 1 :] if c.cell_type == "code"), None)
            if following is None or not is_autograder_tests(following):
                findings.append(f"solution cell {cell_id!r} ({place}) has no autograder-tests cell after it")
        if marked(cell, NBVAL_RAISES) and not raises_on_purpose(cell):
            findings.append(f"{place} is marked {NBVAL_RAISES} but not tagged {RAISES_TAG} (Run All stops there)")
        if raises_on_purpose(cell) and not marked(cell, NBVAL_RAISES):
            findings.append(f"{place} is tagged {RAISES_TAG} but not marked {NBVAL_RAISES} for the student")
    return findings


SILENT_CALLS = frozenset({"print", *(name for name in dir(checks) if name.startswith("check_"))})
"""Functions whose call may end a test cell: they return None, so the cell shows no value."""


EXPECTING_CHECKS = frozenset({"check_equal", "check_close", "check_shape", "check_dtype", "check_device"})
"""The check helpers that take an expected value (by default the reference solution's, judged outside the kernel)."""


def hidden_oracle_findings(source: str) -> list[tuple[int, str]]:
    """``(line, problem)`` for each way the hidden tests of an autograder-tests cell's ``source`` (the lines after
    ``### BEGIN HIDDEN TESTS``; lines counted from 1) hand the kernel what a check expects: a call of one of
    :data:`EXPECTING_CHECKS` given an expected value (a second positional argument, ``expected=``, or
    arguments unpacked with ``*`` or ``**``), and a name assigned, defined or imported there and never read there
    (a leftover expected value, or the function that computed it). A student's code runs in the same kernel first
    and can replace the checks, so a hidden check must leave its expected value to the reference solution's run
    (see ``autograder/kernel/checks.py``)."""
    lines = source.splitlines()
    begin = next((n for n, line in enumerate(lines, 1) if line.strip() == HIDDEN_TEST_MARKERS[0]), None)
    if begin is None:
        return []
    hidden = [node for node in ast.walk(ast.Module(body=_parsed(source)[1], type_ignores=[]))
              if getattr(node, "lineno", 0) > begin]
    findings = []
    for node in hidden:
        name = node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) else None
        if name in EXPECTING_CHECKS and (
            len(node.args) > 1
            or any(isinstance(argument, ast.Starred) for argument in node.args)
            or any(keyword.arg in ("expected", None) for keyword in node.keywords)
        ):
            findings.append((node.lineno, f"{name} is given an expected value: a hidden check takes none"))
    bound = _bound(hidden)
    unread = _unread(hidden, {name for _, name in bound} - {"_"})
    findings += [
        (line, f"{name!r} is assigned and never read: a hidden test keeps no expected value")
        for line, name in bound
        if name in unread
    ]
    return sorted(findings)


def _unread(nodes: list[ast.AST], bound: set[str]) -> set[str]:
    """The names of ``bound`` whose values no statement among ``nodes`` reads, but to write into names of the same
    kind (``expected = ...`` then ``expected[0] = expected[0] + 1`` reads nothing that counts)."""
    statements = [node for node in nodes if isinstance(node, ast.stmt)]
    unread = set(bound)
    while True:
        read = {name for statement in statements if not _writes_only(statement, unread) for name in _loads(statement)}
        if not read & unread:
            return unread
        unread -= read


def _loads(statement: ast.stmt) -> Iterator[str]:
    """The names a statement's own expressions load (not those of the statements nested in it)."""
    stack = [child for child in ast.iter_child_nodes(statement) if not isinstance(child, ast.stmt)]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            yield node.id
        stack.extend(child for child in ast.iter_child_nodes(node) if not isinstance(child, ast.stmt))


def _writes_only(statement: ast.stmt, names: set[str]) -> bool:
    """Whether ``statement`` is an assignment whose every target is (an item or attribute of) one of ``names``."""
    if isinstance(statement, ast.Assign):
        targets = list(statement.targets)
    elif isinstance(statement, (ast.AugAssign, ast.AnnAssign)):
        targets = [statement.target]
    else:
        return False
    roots = []
    while targets:
        target = targets.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            targets.extend(target.elts)
        elif isinstance(target, (ast.Subscript, ast.Attribute, ast.Starred)):
            targets.append(target.value)
        else:
            roots.append(target)
    return all(isinstance(root, ast.Name) and root.id in names for root in roots)


def _bound(nodes: list[ast.AST]) -> list[tuple[int, str]]:
    """``(line, name)`` for each name that ``nodes`` bind: assigned, defined (``def``, ``class``) or imported;
    not a class's attributes and methods (read through its instances)."""
    members = {id(inner) for node in nodes if isinstance(node, ast.ClassDef) for statement in node.body
               for inner in ast.walk(statement)}
    bound = []
    for node in nodes:
        if id(node) in members:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.append((node.lineno, node.id))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.append((node.lineno, node.name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound += [(node.lineno, alias.asname or alias.name.partition(".")[0]) for alias in node.names]
    return bound


def _parsed(source: str) -> tuple[str, list[ast.stmt]]:
    """A code cell as Python (IPython's magics and ``!`` translated) and its statements (none if it does not parse)."""
    python = TransformerManager().transform_cell(source)
    try:
        return python, ast.parse(python).body
    except SyntaxError:
        return python, []


def returning_nothing(notebook: nbformat.NotebookNode) -> set[str]:
    """Names of the functions the notebook's code cells define that never return a value."""
    names = set()
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.Module(body=_parsed(cell.source)[1], type_ignores=[])):
            if isinstance(node, ast.FunctionDef) and not any(
                isinstance(inner, ast.Return) and inner.value is not None for inner in ast.walk(node)
            ):
                names.add(node.name)
    return names


def bare_expression(source: str, *, silent: frozenset[str] | set[str] = SILENT_CALLS) -> str | None:
    """The last statement of a code cell's ``source`` when it is an expression whose value IPython would
    show as the cell's result (None otherwise, and for a cell that does not parse).

    Calls of the functions named in ``silent`` (which return None) and a statement ending in ``;``
    (IPython shows nothing then) are not counted.
    """
    python, body = _parsed(source)
    if not body or not isinstance(body[-1], ast.Expr):
        return None
    value = body[-1].value
    after = "\n".join(python.splitlines()[value.end_lineno - 1 :])[value.end_col_offset :]
    if after.lstrip().startswith(";"):
        return None
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in silent:
        return None
    return ast.get_source_segment(python, value)


OPAQUE_GRADE_ID = re.compile(r"^cell-[0-9a-f]{8,}$")
"""The grade_ids JupyterLab's "Create Assignment" makes up, e.g. ``cell-9f8e7d6c5b4a3f2e``."""


def grade_id_findings(notebook: nbformat.NotebookNode) -> list[str]:
    """grade_ids that say nothing of their task: in a task, one that does not start with the prefix its
    heading gives (``Task 2.3 - ...`` gives ``task_2_3_``); anywhere, one JupyterLab made up. Results
    and feedback name each cell by its grade_id."""
    findings = []
    for index, (cell, task) in enumerate(zip(notebook.cells, task_headings(notebook))):
        cell_id, place = grade_id(cell), cell_number(index)
        if cell_id is None:
            continue
        if task is not None and not cell_id.startswith(task.grade_id_prefix + "_"):
            findings.append(
                f"grade_id {cell_id!r} ({place}) is not derived from its heading {task.title!r}: "
                f"name it {task.grade_id_prefix}_<what it does>"
            )
        elif task is None and OPAQUE_GRADE_ID.match(cell_id):
            findings.append(
                f"grade_id {cell_id!r} ({place}) is JupyterLab's made-up id: name it after what it grades"
            )
    return findings


NUMBER_WORDS = {
    word: number
    for number, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen".split()
    )
}
STATED_TASKS = re.compile(r"\bthere (?:are|is) (\w+) tasks?\b", re.IGNORECASE)
STATED_POINTS = re.compile(r"\b(\d+) points in (?:all|total)\b", re.IGNORECASE)


def stated_count_findings(notebook: nbformat.NotebookNode) -> list[str]:
    """Where the notebook's opening (its markdown cells before the first code cell) states how many tasks
    (``There are six tasks``) or points (``17 points in all``) it has, and its grade cells disagree: the
    tasks are the task headings (:func:`autograder.course.task_headings`) with an autograder-tests cell
    under them, the points those of every grade cell."""
    opening = "\n".join(
        cell.source for cell in itertools.takewhile(lambda c: c.cell_type == "markdown", notebook.cells)
    )
    tasks = {task for cell, task in zip(notebook.cells, task_headings(notebook)) if task and is_autograder_tests(cell)}
    points = sum(nbgrader_meta(cell).get("points") or 0 for cell in notebook.cells if is_grade(cell))
    findings = []
    if (stated := STATED_TASKS.search(opening)) is not None:
        count = NUMBER_WORDS.get(stated.group(1).lower(), int(stated.group(1)) if stated.group(1).isdigit() else None)
        if count != len(tasks):
            findings.append(f"the opening says {stated.group(0)!r}, but {len(tasks)} task(s) have test cells")
    if (stated := STATED_POINTS.search(opening)) is not None and float(stated.group(1)) != points:
        findings.append(f"the opening says {stated.group(0)!r}, but the grade cells give {points:g} points")
    return findings


def release_findings(
    course: Course, assignment_id: str, source: nbformat.NotebookNode, *, fresh: Path | None, fix: str = RUN_BUILD
) -> list[str]:
    """Staleness against ``fresh``, the release folder nbgrader generate_assignment just made from source/ (None:
    nbgrader refused the source, nothing is compared), and leaked solutions or hidden tests. ``fix``: what a
    stale or missing file's finding says to do."""
    released = course.release / assignment_id
    if not course.release_notebook(assignment_id).exists():
        return [f"release/{assignment_id}: missing; {fix}"]
    findings = []
    release = read_notebook(course.release_notebook(assignment_id))
    findings += [f"release/{assignment_id}: {f}" for f in leak_findings(source, release)]
    if fresh is None:
        return findings
    fresh_files = {p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file()}
    release_files = {p.relative_to(released) for p in released.rglob("*") if p.is_file()}
    for name in sorted(fresh_files ^ release_files):
        side = "missing from" if name in fresh_files else "not generated from source into"
        findings.append(f"release/{assignment_id}: {name} is {side} release/ (stale; {fix})")
    for name in sorted(fresh_files & release_files):
        if name.suffix == ".ipynb":
            difference = first_difference(read_notebook(fresh / name), read_notebook(released / name))
            if difference:
                findings.append(f"release/{assignment_id}/{name} is stale ({difference}); {fix}")
        elif not filecmp.cmp(fresh / name, released / name, shallow=False):
            findings.append(f"release/{assignment_id}/{name} is stale; {fix}")
    return findings


def leak_findings(source: nbformat.NotebookNode, release: nbformat.NotebookNode) -> list[str]:
    """Markers, solution lines, hidden-test lines or written answers of ``source`` found in ``release``.

    A line counts as leaked when it is secret (:func:`autograder.authoring.leaks.secret_lines`): in a solution or
    hidden-test region or a written answer of the source and nowhere else in the source (so a line the release is
    meant to show, such as a function's ``def`` line, never counts).
    """
    secret = secret_lines(source)
    findings = []
    for index, (cell, task) in enumerate(zip(release.cells, task_headings(release))):
        for line in cell.source.splitlines():
            if what := leaked(line, secret):
                findings.append(f"{_place(index, task)} holds {what}")
    return findings


def reference_findings(course: Course, assignment_id: str, *, fix: str = RUN_BUILD) -> list[str]:
    """Staleness of notebooks/<id>.ipynb against source/, unexecuted cells, stderr, test cells without records.
    ``fix``: what a stale or missing file's finding says to do."""
    path = course.reference_notebook(assignment_id)
    where = f"notebooks/{assignment_id}.ipynb"
    if not path.exists():
        return [f"{where}: missing; {fix}"]
    findings = []
    if not (course.notebooks / "checks.py").exists():
        findings.append(f"notebooks/checks.py is missing (a link to {CHECKS_MODULE.name}); {fix}")
    stored = read_notebook(path)
    difference = first_difference(reference_cells(course, assignment_id), stored, notebook_metadata=False)
    if difference:
        findings.append(f"{where} is stale ({difference}); {fix}")
    for index, (cell, task) in enumerate(zip(stored.cells, task_headings(stored))):
        if cell.cell_type != "code":
            continue
        place = _place(index, task)
        if cell.get("execution_count") is None:
            findings.append(f"{where}: {place} has not been executed")
        if any(o.output_type == "stream" and o.name == "stderr" for o in cell.outputs):
            findings.append(f"{where}: {place} has stderr output")
        if any(o.output_type == "error" for o in cell.outputs) and not raises_on_purpose(cell):
            findings.append(f"{where}: {place} raises but is not tagged {RAISES_TAG} (Run All would stop there)")
        if is_autograder_tests(cell) and not cell_records(cell):
            findings.append(
                f"{where}: test cell {grade_id(cell)} records no check (use the helpers in checks.py), "
                "so the verdict outside the kernel cannot judge it"
            )
        elif is_autograder_tests(cell) and any(r.get("version") != RECORD_VERSION for r in cell_records(cell)):
            findings.append(f"{where}: test cell {grade_id(cell)} holds old check records; {fix}")
        elif is_autograder_tests(cell) and (problem := group_problem(cell)):
            findings.append(f"{where}: test cell {grade_id(cell)} {problem}")
    return findings


def group_problem(cell: nbformat.NotebookNode) -> str | None:
    """What is wrong with the groups (``checks.check_group``) of an executed autograder-tests cell of the reference, by
    its records (``None`` when nothing is, or it has no groups): a group declared twice with different points, a
    group whose block raised on the reference, groups whose points do not sum to the cell's points."""
    declared: dict[str, set[float]] = {}
    for record in filter(is_group_end, cell_records(cell)):
        declared.setdefault(record["label"], set()).add(float(record["rule"]["points"]))
        if record["value"]["raised"] is not None:
            return f"raises {record['value']['raised']['exception']} in group {record['label']!r} on the reference"
    if not declared:
        return None
    if twice := [name for name, points in declared.items() if len(points) > 1]:
        return f"declares group {twice[0]!r} with different points"
    total, points = sum(min(p) for p in declared.values()), float(cell.metadata["nbgrader"]["points"])
    if total != points:
        names = ", ".join(f"{name!r} {min(p):g}" for name, p in declared.items())
        return f"has groups whose points ({names}) sum to {total:g}, not the cell's {points:g} points"
    return None


def first_difference(
    expected: nbformat.NotebookNode, actual: nbformat.NotebookNode, *, notebook_metadata: bool = True
) -> str | None:
    """Where two notebooks differ, ignoring cell ids, outputs, execution counts and execution metadata.

    Returns a short description of the first difference, or None.
    """
    if notebook_metadata and expected.metadata != actual.metadata:
        return "notebook metadata differs"
    if len(expected.cells) != len(actual.cells):
        return f"{len(actual.cells)} cells instead of {len(expected.cells)}"
    for index, (want, have) in enumerate(zip(expected.cells, actual.cells)):
        if want.cell_type != have.cell_type:
            return f"{cell_number(index)} is {have.cell_type} instead of {want.cell_type}"
        if want.source != have.source:
            return f"{cell_number(index)} source differs"
        if _metadata(want) != _metadata(have):
            return f"{cell_number(index)} metadata differs"
    return None


def _metadata(cell: nbformat.NotebookNode) -> dict:
    return {key: value for key, value in cell.metadata.items() if key != "execution"}
