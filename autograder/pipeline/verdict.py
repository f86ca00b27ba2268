"""Stage ``verdict``: judge each test cell again outside the kernel, from the values its checks recorded.

A student's kernel runs their code and the tests in one process, so what the
kernel reports (an error or none) can be forged: a replaced ``check_close``,
an object equal to everything, a silenced traceback, a hook that rewrites or
skips test cells. The check helpers (``autograder/kernel/checks.py``) therefore
record, for every check, the value checked, the expected value and the rule.

Once per batch the reference solution runs through the same tests in the
same environment (:func:`reference_records`); its records give the trusted
expected values and rules. A hidden test's check is given no expected value
(``checks.REFERENCE``; ``autograder check`` enforces it): its reference
record holds none, and the reference run's own value stands in for it. After nbgrader has executed a submission,
:class:`CompareRecords` (an nbgrader preprocessor, registered in
``nbgrader_config.py`` right after ``Execute``) compares each autograder-tests
cell's records with the reference's, one by one, and judges the student's
value against the reference's expected value and rule here, outside the
kernel (never the student's record's expected value, which the verdict does
not read). A missing, extra, reordered or failing record adds an error output
to the cell, so nbgrader scores it 0 whatever the kernel printed or hid.

nbgrader scores a test cell by its outputs in order: the first error or
stderr stream gives 0, but the first ``execute_result`` before them gives the
points it holds as text (partial credit), and a kernel can emit one whenever
it likes (a graded function calling ``get_ipython().displayhook(2.0)``).
:class:`CompareRecords` therefore turns every ``execute_result`` of a test cell
into a ``display_data`` output (shown the same, scored by nobody): what is
left for nbgrader to read is errors and stderr only, in any order, and a
failed verdict is an error. The score of a test cell is full marks with no
error and no stderr, else 0, whatever else the kernel sent and in what order.

Partial credit: a test cell may split its checks into named groups with points each (``checks.check_group``; the
course author declares them in the test cell, so the reference run's records carry them). :func:`judge` then
judges each group on its own, and the cell's first output becomes an ``execute_result`` holding the points of
the groups that passed (:func:`score_output`), which nbgrader reads before any error; each failed group adds an
error naming it. The points come from the reference's records only: a kernel that forges a group's records can
claim no more points than the reference declared, and only for checks whose values it knows. A test cell with
groups that wrote to stderr keeps nbgrader's 0.

A test cell whose reference run records nothing is left to nbgrader's own
verdict (``autograder check`` reports such cells), its execute_results made
display_data all the same. What this cannot stop: a
kernel that forges records (reaches the check helpers' module or IPython's
display and records the expected value a test handed it), since nothing a
kernel sends can prove where it came from. Hidden checks hand the kernel no
expected value, so forging gains only the visible checks (whose expected
values the student reads anyway), ``check_raises`` and
``check_shares_memory`` (whose exception types and booleans a task's
statement gives); every way to forge needs code that
``autograder.kernel.machinery`` reports, so such a submission is flagged for a
person to review.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
from nbformat import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

from ..course import CHECKS_MODULE, Course, grade_id, is_autograder_tests
from .execute import STORE
from .reference import execute_notebook, reference_cells


@functools.cache
def checks_constant(name: str) -> Any:
    """The value of ``name`` in ``checks.py`` (:data:`autograder.course.CHECKS_MODULE`), a literal assigned at its
    top level, read from its source rather than imported: checks.py imports torch (about 1.5 s of CPU), which the
    grader's own processes (the command, the batch's workers, the nbgrader sessions) do not otherwise need.

    Raises:
        KeyError: checks.py assigns no literal to ``name`` at its top level.
    """
    for node in ast.parse(CHECKS_MODULE.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(target, ast.Name) and target.id == name for target in targets) and node.value is not None:
            return ast.literal_eval(node.value)
    raise KeyError(f"{CHECKS_MODULE} assigns no literal to {name}")


RECORD_MIME_TYPE: str = checks_constant("RECORD_MIME_TYPE")
"""The MIME type of a check record in a cell's outputs (:data:`checks.RECORD_MIME_TYPE`)."""

UNWRITTEN: str = checks_constant("_UNWRITTEN")
"""The exception a released solution cell raises, which passes no ``raises`` check that does not name it
(``checks._UNWRITTEN``): it is a ``RuntimeError``, and blank work must not earn an errors group's points."""

MISMATCH = "CheckRecordMismatch"
"""``ename`` of the error output the verdict adds to a cell it fails."""

HIDDEN_FAILED = "A hidden test failed"
"""How the verdict's message begins when a check given no expected value (a hidden test's) fails: the feedback page
shows it as it is (:mod:`autograder.feedback`), as it shows a hidden test's failed assertion."""


def cell_records(cell: NotebookNode) -> list[Any]:
    """The check records a code cell's outputs hold, in order: the items of each array under the record MIME type
    (``checks.py`` publishes a cell's records as one array when the cell ends); anything else found under it
    counts as one record (it fails unless it is one)."""
    found: list[Any] = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "display_data" and RECORD_MIME_TYPE in output.get("data", {}):
            payload = output["data"][RECORD_MIME_TYPE]
            found.extend(payload if isinstance(payload, list) else [payload])
    return found


def records_by_cell(notebook: NotebookNode) -> dict[str, list[Any]]:
    """``{grade_id: records}`` for every autograder-tests cell of an executed notebook."""
    return {grade_id(cell): cell_records(cell) for cell in notebook.cells if is_autograder_tests(cell)}


def reference_records(course: Course, assignment_id: str, *, sandboxed: bool = False) -> dict[str, list[Any]]:
    """Run the reference solution's notebook (source/ without markers) and collect its records per test cell.

    The kernel starts in a scratch folder holding ``checks.py``, with this
    process's environment and ``NBGRADER_EXECUTION=autograde``, as nbgrader's
    kernels do (notebooks size some work by it), whoever calls this;
    ``sandboxed``: in the students' sandbox (forked, so faster, as root).
    """
    with tempfile.TemporaryDirectory(prefix="reference-") as scratch:
        shutil.copy(CHECKS_MODULE, Path(scratch) / "checks.py")
        env = {"NBGRADER_EXECUTION": "autograde"}
        notebook = reference_cells(course, assignment_id)
        executed = execute_notebook(notebook, cwd=Path(scratch), env=env, sandboxed=sandboxed)
    return records_by_cell(executed)


def stored_reference(course: Course, assignment_id: str) -> Path:
    """Where :mod:`autograder.pipeline.batch` stores an assignment's reference records: named by the SHA-256 of the
    reference notebook's cells and ``checks.py``, so an edited source/ or helper is run afresh."""
    cells = [[cell.cell_type, cell.source] for cell in reference_cells(course, assignment_id).cells]
    digest = hashlib.sha256(json.dumps(cells).encode() + CHECKS_MODULE.read_bytes()).hexdigest()
    return course.root / STORE / f"reference-{assignment_id}-{digest}.json"


GROUP_LOST = "Lost the points of the group"
"""How the verdict's message for a failed group of checks (``checks.check_group``) begins; the feedback page shows it as
it is."""


@dataclass(frozen=True)
class GroupVerdict:
    """The verdict on one group of a test cell's checks (``checks.check_group``), or on the checks outside groups."""

    name: str | None
    """The group's name as the reference run declared it; ``None`` for the checks made outside any group."""
    points: float
    """The group's points as the reference run declared them (never as the student's kernel claims); 0 for the
    checks outside groups, which every group needs: when one of them fails, the cell scores 0."""
    problem: str | None
    """Why the group failed (its message begins :data:`GROUP_LOST` for a named group); ``None`` when it passed."""


def is_group_end(record: Any) -> bool:
    """Whether ``record`` is the one ``checks.check_group`` makes when a group's block ends."""
    return isinstance(record, dict) and record.get("check") == "group"


def _by_group(records: list[Any]) -> tuple[dict[Any, list[Any]], dict[Any, list[Any]]]:
    """``({group name or None: its check records}, {group name: its group-end records})``, each list in order."""
    checks: dict[Any, list[Any]] = {None: []}
    ends: dict[Any, list[Any]] = {}
    for record in records:
        if is_group_end(record):
            ends.setdefault(record.get("label"), []).append(record)
        else:
            group = record.get("group") if isinstance(record, dict) else None
            checks.setdefault(group if isinstance(group, str) else None, []).append(record)
    return checks, ends


def judge(student: list[Any], reference: list[Any]) -> list[GroupVerdict]:
    """The verdict on each group of a test cell: first the checks made outside groups, then each group the reference
    run declared (``checks.check_group``), in its order.

    The records of each group are judged as a cell's are (:func:`first_mismatch`) against the reference's records
    of the same group: a student's group passes when all its checks pass and each of its blocks ran to its end
    without an exception. Points come from the reference's group records only. A student's record in a group the
    reference has not fails the checks outside groups (whose failure costs every group), as does any missing,
    extra or failing record made outside groups. A cell without groups gets one verdict (``name`` ``None``).
    """
    wanted, wanted_ends = _by_group(reference)
    found, found_ends = _by_group(student)
    strays = [name for name in found if name is not None and name not in wanted]
    outside = _first_mismatch(found[None], wanted[None])
    if outside is None and strays:
        outside = f"check records in group(s) the tests do not make: {', '.join(map(repr, strays))}"
    verdicts = [GroupVerdict(None, 0.0, outside)]
    for name, ends in wanted_ends.items():
        points = float(ends[0]["rule"]["points"])
        problem = _first_mismatch(found.get(name, []), wanted.get(name, []))
        raised = [end["value"]["raised"] for end in found_ends.get(name, []) if _raised(end)]
        if problem is None and raised:
            problem = f"an exception ended it ({raised[0].get('exception')})"
        elif problem is None and len(found_ends.get(name, [])) != len(ends):
            problem = "it did not run to its end"
        if problem is not None:
            problem = f"{GROUP_LOST} {name!r} ({points:g} of the cell's points): {problem}"
        verdicts.append(GroupVerdict(name, points, problem))
    return verdicts


def _raised(end: dict[str, Any]) -> bool:
    value = end.get("value")
    return not isinstance(value, dict) or value.get("raised") is not None


def earned(verdicts: list[GroupVerdict], points: float) -> float:
    """A test cell's score from :func:`judge`'s verdicts: 0 when a check outside groups failed; else, in a cell with
    groups, the points of the groups that passed (at most ``points``, the cell's); in one without, ``points``."""
    if verdicts[0].problem is not None:
        return 0.0
    if len(verdicts) == 1:
        return points
    return min(points, sum(verdict.points for verdict in verdicts[1:] if verdict.problem is None))


def first_mismatch(student: list[Any], reference: list[Any]) -> str | None:
    """Why a cell's records fail against the reference's (``None`` when they pass): the first problem
    :func:`judge` finds, group by group."""
    return next((verdict.problem for verdict in judge(student, reference) if verdict.problem is not None), None)


def _first_mismatch(student: list[Any], reference: list[Any]) -> str | None:
    """Why a list of check records (one group's, or a cell's without groups) fails against the reference's
    (``None`` when it passes).

    Records are paired in order; each pair must name the same check and
    label, the object checked must be of the exact type the reference's was
    (a ``tuple`` where the reference returns a tuple, not a list; a Python
    ``float``, not a 0-d tensor or a NumPy scalar; ``raises`` records aside;
    with the test's ``check_dtype=False``, any real number for a real number,
    :func:`_same_type`),
    and the student's value must pass the reference's expected value under
    the reference's rule (:func:`passes`); where the reference record has
    no expected value (a hidden check, given none), the reference's value
    under its rule, and a value too large to be judged here fails (no
    kernel could judge it; the message then begins :data:`HIDDEN_FAILED`). A value the kernel refused to
    encode (``{"refused": why}``: a tensor or array subclass) passes nothing.
    """
    for number, trusted in enumerate(reference, start=1):
        where = f"check {number} of {len(reference)} ({trusted.get('label')})"
        if number > len(student):
            return f"{where} did not run"
        record = student[number - 1]
        if not isinstance(record, dict) or (record.get("check"), record.get("label")) != (
            trusted.get("check"),
            trusted.get("label"),
        ):
            return f"{where}: a different check ran in its place"
        if trusted.get("check") != "raises" and not _same_type(record.get("type"), trusted):
            return f"{where}: got a {record.get('type')} where the reference solution gives a {trusted.get('type')}"
        hidden = "expected" not in trusted  # the kernel was never told what passes: only this judgement counts
        wanted = trusted.get("value") if hidden else trusted["expected"]
        judged = passes(trusted["check"], record.get("value"), wanted, trusted.get("rule", {}))
        if judged is False or (judged is None and hidden):
            if hidden:  # worded as a failed hidden assertion was, for the student's feedback
                position = f"check {number} of {len(reference)}, judged outside the kernel"
                return f"{HIDDEN_FAILED}: {trusted.get('label')} ({position})"
            return f"{where} failed when judged outside the kernel"
    if len(student) > len(reference):
        return f"{len(student) - len(reference)} check record(s) more than the tests make"
    return None


REAL_NUMBER = re.compile(r"float|int|numpy\.(u?int|float)\d+")
"""Type names of the real numbers a test's ``check_dtype=False`` lets stand for each other (Python's ``float`` and
``int``, NumPy's integer and floating scalars; not ``bool``, not a tensor)."""


def _same_type(name: Any, trusted: dict[str, Any]) -> bool:
    """Whether a record of type ``name`` is of the type of the reference record ``trusted``: the exact type, or,
    where the test passed ``check_dtype=False``, any :data:`REAL_NUMBER` for a real number."""
    if name == trusted.get("type"):
        return True
    relaxed = trusted.get("rule", {}).get("check_dtype", True) is False
    return relaxed and all(isinstance(n, str) and REAL_NUMBER.fullmatch(n) for n in (name, trusted.get("type")))


def passes(check: str, value: Any, expected: Any, rule: dict[str, Any]) -> bool | None:
    """Judge one encoded value as the check helper ``check`` would, outside the kernel.

    Returns ``None`` when the record cannot be judged here (an array too
    large to have its values recorded); the kernel's verdict then stands.
    """
    kind = rule.get("kind")
    if kind == "close":
        return _close(value, expected, rule)
    if kind == "device":
        return _same_device(value, expected)
    if kind == "raises":
        if not isinstance(value, dict) or not isinstance(value.get("mro"), list):
            return False
        match = rule.get("match")
        unwritten = value.get("exception") == UNWRITTEN and UNWRITTEN not in expected
        accepted = bool(set(expected) & set(value["mro"])) and not unwritten
        return accepted and (match is None or match in str(value.get("message")))
    if check == "equal" and _is_array(value) and _is_array(expected):
        a, b = _array(value), _array(expected)
        if (a["dtype"], a["shape"]) != (b["dtype"], b["shape"]):
            return False
        return None if a["data"] is None or b["data"] is None else _strict_equal(a["data"], b["data"])
    return _strict_equal(value, expected)


def _strict_equal(a: Any, b: Any) -> bool:
    """JSON equality that tells ``True`` from ``1`` and ``1`` from ``1.0`` (an object is any dict, nbformat's
    NotebookNode included: records come from notebooks in memory, on disk and from stored JSON)."""
    if _json_kind(a) is not _json_kind(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_strict_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_strict_equal(a[k], b[k]) for k in a)
    return a == b


def _json_kind(value: Any) -> type:
    return dict if isinstance(value, dict) else list if isinstance(value, list) else type(value)


def _is_array(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)) in ("tensor", "ndarray")


def _array(value: Any) -> dict[str, Any]:
    return next(iter(value.values()))


def _numbers(data: Any) -> np.ndarray:
    """Decode recorded values (nested lists, ``{"float": "nan"}``, complex as pairs) to a float array."""

    def decode(item: Any) -> Any:
        if isinstance(item, dict):
            return float(item["float"])
        if isinstance(item, list):
            return [decode(x) for x in item]
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise TypeError(f"not a number: {item!r}")
        return float(item)

    return np.asarray(decode(data), dtype=np.float64)


def _close(value: Any, expected: Any, rule: dict[str, Any]) -> bool | None:
    """As ``torch.testing.assert_close`` with the rule's rtol and atol: shapes, devices, dtypes (if asked), values."""
    if not (_is_array(value) and _is_array(expected)):
        return False
    a, b = _array(value), _array(expected)
    if a["shape"] != b["shape"] or a["device"] != b["device"]:
        return False
    if rule.get("check_dtype", True) and a["dtype"] != b["dtype"]:
        return False
    if a["data"] is None or b["data"] is None:
        return None
    try:
        actual, wanted = _numbers(a["data"]), _numbers(b["data"])
    except (TypeError, KeyError, ValueError):
        return False
    if actual.shape != wanted.shape or np.isnan(actual).any() or np.isnan(wanted).any():
        return False
    infinite = np.isinf(wanted) | np.isinf(actual)
    if not np.array_equal(actual[infinite], wanted[infinite]):
        return False
    finite = ~infinite
    bound = float(rule["atol"]) + float(rule["rtol"]) * np.abs(wanted[finite])
    return bool(np.all(np.abs(actual[finite] - wanted[finite]) <= bound))


def _same_device(value: Any, expected: Any) -> bool:
    if not isinstance(value, str) or not isinstance(expected, str):
        return False
    kind, _, index = value.partition(":")
    expected_kind, _, expected_index = expected.partition(":")
    return kind == expected_kind and (not expected_index or index == expected_index)


def unscored(output: NotebookNode) -> NotebookNode:
    """An output as the verdict leaves it in a test cell: an ``execute_result`` becomes a ``display_data`` of the
    same data and metadata (minus the record MIME type: records come from ``display_data`` only), which nbgrader's
    ``determine_grade`` does not read as a score; any other output is returned as it is."""
    if output.get("output_type") != "execute_result":
        return output
    data = {mime: value for mime, value in output.get("data", {}).items() if mime != RECORD_MIME_TYPE}
    return nbformat.v4.new_output("display_data", data=data, metadata=output.get("metadata", {}))


_REFERENCES: dict[tuple[str, str], dict[str, list[Any]]] = {}
"""Reference records per (course root, assignment), computed once per process: nbgrader makes a new
preprocessor instance for every notebook, and runs one autograde process per assignment and batch."""


def reference_of(preprocessor: NbGraderPreprocessor, assignment_id: str) -> dict[str, list[Any]]:
    """The reference's records of an assignment (``{grade_id: records}``) for an nbgrader preprocessor of the
    course in its config (or the working folder): stored by the batch, else computed here, once per process."""
    root = str(preprocessor.config.get("CourseDirectory", {}).get("root") or os.getcwd())
    if (root, assignment_id) not in _REFERENCES:
        course = Course(Path(root))
        try:
            _REFERENCES[(root, assignment_id)] = json.loads(stored_reference(course, assignment_id).read_text())
        except (OSError, ValueError):  # not computed ahead by the batch
            preprocessor.log.info("Running the reference solution of %s for its check records", assignment_id)
            _REFERENCES[(root, assignment_id)] = reference_records(course, assignment_id)
    return _REFERENCES[(root, assignment_id)]


class CompareRecords(NbGraderPreprocessor):
    """nbgrader autograde preprocessor: fail every test cell whose records do not pass against the reference's,
    and leave nbgrader no output of a test cell to score but errors and stderr (:func:`unscored`)."""

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        reference = reference_of(self, resources["nbgrader"]["assignment"])
        for cell in nb.cells:
            if not is_autograder_tests(cell):
                continue
            records = cell_records(cell)
            cell.outputs = [unscored(output) for output in cell.get("outputs", [])]
            trusted = reference.get(grade_id(cell))
            if not trusted:
                continue
            grouped = any(is_group_end(record) for record in trusted)
            if not grouped and any(output.get("output_type") == "error" for output in cell.outputs):
                continue  # nbgrader scores it 0 already
            verdicts = judge(records, trusted)
            for problem in [verdict.problem for verdict in verdicts if verdict.problem is not None]:
                cell.outputs.append(
                    nbformat.v4.new_output("error", ename=MISMATCH, evalue=problem, traceback=[problem])
                )
            if grouped and not any(output.get("name") == "stderr" for output in cell.outputs):
                points = float(cell.metadata["nbgrader"]["points"])
                cell.outputs.insert(0, score_output(earned(verdicts, points)))
        return nb, resources


def score_output(score: float) -> NotebookNode:
    """The first output of a test cell with groups after the verdict: an ``execute_result`` whose text is the
    score, which nbgrader's ``determine_grade`` reads (before any error) as the cell's partial credit. Only the
    verdict makes one: every ``execute_result`` the kernel sent has become a ``display_data`` (:func:`unscored`)."""
    return nbformat.v4.new_output("execute_result", data={"text/plain": f"{score:g}"})
