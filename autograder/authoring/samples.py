"""Sample submissions: the reference, the unchanged release, realistic wrong answers and hostile submissions.

Wrong answers live in ``tests/submissions/<assignment_id>.toml``, one
``[[wrong_answer]]`` table each::

    name = "one_hot_int64"                 # what it shows; the student id is wrong_<name>
    cell = "task_1_1_one_hot_solution"     # grade_id of the solution cell it replaces
    loses = ["task_1_1_one_hot"]           # test cells that must score 0; every other keeps full marks
                                           # ("task_2_2_unravel_position/edge cases and errors": only that group
                                           # of checks of a test cell with groups loses its points)
    mistake = "why a student writes this, and why it is wrong"
    source = '''def one_hot(...): ...'''    # the cell's whole new source

Hostile submissions (``tests/hostile/<assignment_id>.toml``, ``[[hostile]]``
tables with the same fields, ``trick`` instead of ``mistake``; student ids
``hostile_<name>``) pair a wrong answer with an attack on the grading: the
cells in ``loses`` must score 0 however the kernel was tricked. Any sample may
also give ``first_cell``, the source of a code cell the student added at the
top of the notebook (it runs before the setup cell).

Kernel stoppers (``[[stops_kernel]]`` tables in the same files, ``how``
instead of ``mistake``; student ids ``stops_<name>``) exit, crash or hang the
kernel; they must lose only the cells in ``loses``. They also give the
submission's ``status`` and, in ``task_status``, the status of the cells hit
(``{grade_id = "kernel died"}``, see :attr:`autograder.results.report.TaskResult.status`).

Escapes (``[[escape]]`` tables in the same files, ``attempt`` instead of
``mistake``, and ``status``; student ids ``escape_<name>``) reach outside the
kernel's folder for what grading keeps from students (the instructor's
source/); in the sandbox they find nothing and must lose ``loses``.

Self-scorers (``[[scores_itself]]`` tables in the same files, ``trick`` and
``status``; student ids ``scored_<name>``) make the kernel send an
``execute_result`` while a test cell runs, which stock nbgrader reads as the
cell's score; the cells in ``loses`` must score 0, the others exactly their points.

Leaks (``[[leaks_hidden_tests]]`` tables, ``trick`` and ``status``; student
ids ``leaks_<name>``; ``loses`` may be empty) print what the kernel holds of
the hidden tests, each print marked ``LEAKED``: the feedback page must show
none of it. HTML injectors (``[[injects_html]]``, the same fields, ids
``html_<name>``) put scripts and event handlers in answers and outputs: the
feedback page must carry none of them as markup. Cross-student attackers
(``[[harms_others]]``, ids ``cross_<name>``) try to reach the students graded
after them by the same worker; those must get exactly their grades. Output
floods (``[[floods_output]]``, ids ``floods_<name>``) send outputs of every
type past the limits (errors, one message over the size limit, display
updates); they must lose ``loses``, and the grader's memory stays bounded.

Valid alternatives (``[[valid_alternative]]`` tables in the wrong answers'
file: ``name``, ``cell``, ``note`` saying how it differs, ``source``; no
``loses``; student ids ``valid_<name>``) are other correct solutions, which
must keep full marks: tests must not judge a choice the task leaves free.

Submissions are composed from the release notebook (what a student starts
from) with solution cells filled in from source/, so they never go stale.
"""

from __future__ import annotations

import copy
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..pipeline.verdict import cell_records, is_group_end
from ..course import (
    ROOT,
    Course,
    CourseError,
    grade_id,
    is_autograder_tests,
    is_grade,
    is_solution,
    read_notebook,
    strip_markers,
)

SAMPLES_DIR = ROOT / "tests" / "submissions"
HOSTILE_DIR = ROOT / "tests" / "hostile"


@dataclass(frozen=True)
class Sample:
    """A submission with the score every grade cell must get."""

    student_id: str
    assignment_id: str
    notebook: nbformat.NotebookNode
    expected: dict[str, float]
    """grade_id -> expected score (manually graded answers: 0 until an instructor grades them)."""
    expected_status: str = "ok"
    """Hostile submissions touch the grading machinery, so grading must flag them ``review``; the unchanged
    release is ``unattempted``."""
    expected_task_status: dict[str, str] = field(default_factory=dict)
    """grade_id -> the task status grading must report (only the cells a kernel stopper names)."""

    @property
    def expected_total(self) -> float:
        return sum(self.expected.values())


def samples(course: Course, assignment_id: str) -> list[Sample]:
    """The sample submissions of one assignment.

    Raises:
        CourseError: a wrong answer names a cell or test the notebook lacks,
            or loses no test cell (a "wrong" answer that must keep full marks),
            or a valid alternative loses one.
    """
    source = read_notebook(course.source_notebook(assignment_id))
    release = read_notebook(course.release_notebook(assignment_id))
    solutions = {grade_id(cell): strip_markers(cell.source) for cell in source.cells if is_solution(cell)}
    reference = copy.deepcopy(release)
    for cell in reference.cells:
        if is_solution(cell):
            cell.source = solutions[grade_id(cell)]
    points = {grade_id(c): float(c.metadata["nbgrader"]["points"]) for c in source.cells if is_autograder_tests(c)}
    groups = group_points(course, assignment_id)
    manual = {grade_id(c): 0.0 for c in source.cells if is_grade(c) and is_solution(c)}
    found = [
        Sample("reference", assignment_id, reference, {**points, **manual}),
        Sample("unchanged_release", assignment_id, release, {**{k: 0.0 for k in points}, **manual}, "unattempted"),
    ]
    for kind, variant in variants(assignment_id, root=samples_root(course)):
        what = f"{kind} {variant['name']!r} of {assignment_id}"
        loses = variant.get("loses", [])
        unknown = [name for name in loses if name not in points and name not in groups]
        if kind == "valid" and loses:
            raise CourseError(f"{what} is a valid alternative but loses {loses}")
        if kind not in ("valid", "leaks", "html") and not loses:
            raise CourseError(f"{what} loses no test cell")
        if variant["cell"] not in solutions or unknown:
            raise CourseError(f"{what} names unknown cells: {variant['cell']!r} {unknown}")
        notebook = copy.deepcopy(reference)
        for cell in notebook.cells:
            if grade_id(cell) == variant["cell"]:
                cell.source = variant["source"].strip("\n")
        if "first_cell" in variant:
            notebook.cells.insert(0, nbformat.v4.new_code_cell(variant["first_cell"].strip("\n")))
        expected = {name: (0.0 if name in loses else score) for name, score in points.items()}
        for lost in set(loses) & set(groups):
            cell = lost.partition("/")[0]
            expected[cell] = max(0.0, expected[cell] - groups[lost])
        status = variant.get("status", "review" if kind == "hostile" else "ok")
        found.append(
            Sample(
                f"{kind}_{variant['name']}",
                assignment_id,
                notebook,
                {**expected, **manual},
                status,
                variant.get("task_status", {}),
            )
        )
    return found


def group_points(course: Course, assignment_id: str) -> dict[str, float]:
    """``{"<grade_id>/<group name>": points}`` for each group of checks (``checks.check_group``) of the test cells
    of an assignment, as the reference notebook's records declare them (``notebooks/<id>.ipynb``, which
    ``autograder check`` keeps in step with source/; none when it is missing)."""
    path = course.reference_notebook(assignment_id)
    if not path.exists():
        return {}
    found: dict[str, float] = {}
    for cell in read_notebook(path).cells:
        if is_autograder_tests(cell):
            for record in filter(is_group_end, cell_records(cell)):
                found.setdefault(f"{grade_id(cell)}/{record['label']}", float(record["rule"]["points"]))
    return found


VARIANT_FILES = {
    "wrong": (SAMPLES_DIR, "wrong_answer"),
    "valid": (SAMPLES_DIR, "valid_alternative"),
    "hostile": (HOSTILE_DIR, "hostile"),
    "stops": (HOSTILE_DIR, "stops_kernel"),
    "escape": (HOSTILE_DIR, "escape"),
    "scored": (HOSTILE_DIR, "scores_itself"),
    "leaks": (HOSTILE_DIR, "leaks_hidden_tests"),
    "html": (HOSTILE_DIR, "injects_html"),
    "cross": (HOSTILE_DIR, "harms_others"),
    "floods": (HOSTILE_DIR, "floods_output"),
}
"""Student-id prefix -> (folder of ``<assignment_id>.toml`` files, name of their tables)."""


def samples_root(course: Course) -> Path:
    """Where the course's sample files are (``tests/submissions/``, ``tests/hostile/``): in the course directory
    when it has a ``tests/submissions/`` of its own (a copy made to try a new task, see docs/authoring.md), else in
    this repository."""
    return course.root if (course.root / SAMPLES_DIR.relative_to(ROOT)).is_dir() else ROOT


def variants(assignment_id: str, *, root: Path = ROOT) -> list[tuple[str, dict]]:
    """``(prefix, table)`` for each wrong answer and hostile submission of an assignment, in file order, from the
    sample files under ``root`` (:func:`samples_root`)."""
    found = []
    for prefix, (folder, table) in VARIANT_FILES.items():
        path = root / folder.relative_to(ROOT) / f"{assignment_id}.toml"
        if path.exists():
            with path.open("rb") as handle:
                found.extend((prefix, entry) for entry in tomllib.load(handle).get(table, []))
    return found


def write_download(found: list[Sample], folder: Path) -> Path:
    """Write samples as an LMS-style download: ``folder/<student_id>/<assignment_id>/<assignment_id>.ipynb``."""
    for sample in found:
        path = folder / sample.student_id / sample.assignment_id / f"{sample.assignment_id}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(sample.notebook, path)
    return folder
