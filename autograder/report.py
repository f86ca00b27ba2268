"""Stage ``report``: per-task results from nbgrader's gradebook, the task results CSV, the per-student table."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader.api import Grade, Gradebook, MissingEntry
from nbgrader.plugins import ExportPlugin

from .course import Course, grade_id, is_autograder_tests, is_grade, is_solution, read_notebook
from .execute import KERNEL_DIED, NOT_RUN, TIMEOUT
from .intake import Submission

TASK_STATUSES = {KERNEL_DIED: "kernel died", TIMEOUT: "timeout", NOT_RUN: "not run"}
"""A failed test cell's status by the error the executor gave it (any other failure is ``failed``)."""


@dataclass(frozen=True)
class TaskResult:
    """One grade cell of one submission, as the gradebook holds it."""

    grade_id: str
    score: float
    max_score: float
    autograded: bool
    """True for autograder-tests cells, False for answers an instructor grades by hand."""
    needs_manual_grade: bool
    status: str
    """``ok`` (full marks), ``failed``, ``unattempted`` (the solution cells it checks left as released),
    ``timeout``, ``kernel died``, ``not run`` (the kernel could not be brought back), ``invalid notebook``
    (the submission was unreadable), or for a manually graded answer ``manual grade pending``,
    ``graded by hand`` or ``unanswered`` (left as released: nbgrader scores it 0)."""


@dataclass
class SubmissionResult:
    """One (student, assignment) of a batch.

    ``status`` is ``not graded`` when nbgrader could not grade it, ``nothing
    graded`` for a student of the download none of whose files was taken, else
    the intake status (``ok``, ``repaired``, ``unattempted``, ``review``,
    ``invalid notebook``); ``notes`` say why, what intake changed, and how late
    it was where the gradebook knows the assignment's due date.
    """

    student_id: str
    assignment_id: str
    status: str
    notes: list[str] = field(default_factory=list)
    tasks: list[TaskResult] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(task.score for task in self.tasks)

    @property
    def max_score(self) -> float:
        return sum(task.max_score for task in self.tasks)

    @property
    def needs_manual_grade(self) -> bool:
        return any(task.needs_manual_grade for task in self.tasks)


def collect(course: Course, submissions: list[Submission]) -> list[SubmissionResult]:
    """Read the grades of each submission from the gradebook (after nbgrader autograde ran), in order.

    The gradebook is opened once, and each assignment's source notebook read
    once: what each grade cell is (autograded or manual, and its place in the
    notebook) comes from source/, never from the student's copy.
    """
    grade_cells: dict[str, dict[str, nbformat.NotebookNode]] = {}
    answers_of: dict[str, dict[str, set[str]]] = {}
    results = []
    with Gradebook(course.db_url) as gradebook:
        for submission in submissions:
            student_id, assignment_id = submission.student_id, submission.assignment_id
            result = SubmissionResult(student_id, assignment_id, status="not graded", notes=submission.notes)
            results.append(result)
            autograded = course.root / "autograded" / student_id / assignment_id / f"{assignment_id}.ipynb"
            if not autograded.exists():
                continue
            try:
                notebook = gradebook.find_submission_notebook(assignment_id, assignment_id, student_id)
            except MissingEntry:
                continue
            if assignment_id not in grade_cells:
                source = read_notebook(course.source_notebook(assignment_id))
                grade_cells[assignment_id] = {grade_id(cell): cell for cell in source.cells if is_grade(cell)}
                answers_of[assignment_id] = answers_tested(source)
            if notebook.assignment.total_seconds_late > 0:
                result.notes.append(f"late by {duration(notebook.assignment.total_seconds_late)} (nbgrader)")
            cells = grade_cells[assignment_id]
            order = list(cells)
            grades = sorted(notebook.grades, key=lambda g: order.index(g.name) if g.name in order else len(order))
            executed = read_notebook(autograded)
            errors = {
                grade_id(cell): {output.get("ename") for output in cell.get("outputs", [])}
                for cell in executed.cells
                if is_grade(cell)
            }
            result.tasks = [
                TaskResult(
                    grade_id=grade.name,
                    score=float(grade.score),
                    max_score=float(grade.max_score),
                    autograded=grade.name in cells and is_autograder_tests(cells[grade.name]),
                    needs_manual_grade=bool(grade.needs_manual_grade),
                    status=_task_status(
                        grade,
                        cells.get(grade.name),
                        errors.get(grade.name, set()),
                        submission.status,
                        unattempted=bool(answers_of[assignment_id].get(grade.name))
                        and answers_of[assignment_id][grade.name] <= submission.unanswered,
                    ),
                )
                for grade in grades
            ]
            result.status = submission.status
    return results


def answers_tested(source: nbformat.NotebookNode) -> dict[str, set[str]]:
    """Test cell grade_id -> the solution cells it checks: those since the previous test cell.

    A test cell right after another one (the knowledge check's questions) checks the same solution cells.
    """
    found, pending, previous = {}, set(), set()
    for cell in source.cells:
        if is_solution(cell):
            pending.add(grade_id(cell))
        elif is_autograder_tests(cell):
            previous = found[grade_id(cell)] = pending or previous
            pending = set()
    return found


def duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    return " ".join(f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "min")) if n) or "under a minute"


def _task_status(
    grade: Grade,
    source_cell: nbformat.NotebookNode | None,
    enames: set,
    submission_status: str,
    *,
    unattempted: bool,
) -> str:
    """What happened to one grade cell (see :attr:`TaskResult.status`), from its grade and error outputs.

    ``unattempted``: every solution cell the test checks was left as released.
    """
    if source_cell is None or not is_autograder_tests(source_cell):
        if grade.needs_manual_grade:
            return "manual grade pending"
        return "graded by hand" if grade.manual_score is not None else "unanswered"
    if grade.score == grade.max_score:
        return "ok"
    if submission_status == "invalid notebook":
        return "invalid notebook"
    if unattempted:
        return "unattempted"
    return next((status for ename, status in TASK_STATUSES.items() if ename in enames), "failed")


TASK_COLUMNS = [
    "assignment",
    "student_id",
    "grade_id",
    "kind",
    "score",
    "max_score",
    "needs_manual_grade",
    "status",
    "submission_status",
    "notes",
]


def write_task_results(results: list[SubmissionResult], path: Path) -> None:
    """Write one CSV row per (submission, grade cell).

    ``status`` is the task's (:attr:`TaskResult.status`), ``submission_status`` the
    submission's (:attr:`SubmissionResult.status`). A submission nbgrader could
    not grade gets one row with an empty grade_id and status ``not graded``.
    """
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(TASK_COLUMNS)
        for result in results:
            notes = "; ".join(result.notes)
            rows = result.tasks or [None]
            for task in rows:
                writer.writerow(
                    [
                        result.assignment_id,
                        result.student_id,
                        task.grade_id if task else "",
                        ("autograded" if task.autograded else "manual") if task else "",
                        f"{task.score:g}" if task else "",
                        f"{task.max_score:g}" if task else "",
                        str(task.needs_manual_grade).lower() if task else "",
                        task.status if task else result.status,
                        result.status,
                        notes,
                    ]
                )


NOTES_WIDTH = 100
"""Characters of status and notes shown in the table (task_results.csv has them in full)."""


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def table(results: list[SubmissionResult], *, extra: dict[str, list[str]] | None = None) -> str:
    """The per-student table: score, autograded tasks passed, manual grading pending, status.

    ``extra`` adds columns: header -> one value per result, in order.
    """
    headers = ["student", "assignment", "score", "tasks passed", "manual", "status"]
    rows = []
    for result in results:
        autograded = [task for task in result.tasks if task.autograded]
        passed = sum(task.score == task.max_score for task in autograded)
        rows.append(
            [
                result.student_id,
                result.assignment_id,
                f"{result.score:g}/{result.max_score:g}" if result.tasks else "-",
                f"{passed}/{len(autograded)}" if result.tasks else "-",
                "pending" if result.needs_manual_grade else "-",
                _shorten(result.status + (f" ({'; '.join(result.notes)})" if result.notes else ""), NOTES_WIDTH),
            ]
        )
    for header, values in (extra or {}).items():
        headers.insert(-1, header)
        for row, value in zip(rows, values):
            row.insert(-1, value)
    return columns(headers, rows)


def columns(headers: list[str], rows: list[list[str]]) -> str:
    """Plain-text table: left-aligned columns two spaces apart, a rule under the headers."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]
    lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [headers, *rows]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


GRADES_COLUMNS = [
    "assignment",
    "duedate",
    "timestamp",
    "student_id",
    "last_name",
    "first_name",
    "email",
    "raw_score",
    "late_submission_penalty",
    "score",
    "max_score",
]
"""nbgrader's grades.csv columns (``nbgrader.plugins.export.CsvExportPlugin``), in its order."""


class QuotedCsvExport(ExportPlugin):
    """``nbgrader export`` to CSV: nbgrader's columns and rows, written by :mod:`csv` so that any id is quoted.

    nbgrader's own CsvExportPlugin joins the fields with commas unquoted, so a
    student id or name holding a comma or a quote shifts that row's columns.
    Configured in nbgrader_config.py (``c.ExportApp.plugin_class``). One row per
    (assignment, student) of the gradebook; a student without a submission
    gets an empty timestamp and 0, as nbgrader's plugin does. ``--to`` as
    nbgrader's (default ``grades.csv``); ``--student``/``--assignment`` filter.
    """

    def export(self, gradebook: Gradebook) -> None:
        students = {str(s) for s in self.student}
        assignments = {str(a) for a in self.assignment}
        with open(self.to or "grades.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=GRADES_COLUMNS)
            writer.writeheader()
            for assignment in gradebook.assignments:
                if assignments and assignment.name not in assignments:
                    continue
                for student in gradebook.students:
                    if students and student.id not in students:
                        continue
                    row = {
                        "assignment": assignment.name,
                        "duedate": assignment.duedate,
                        "student_id": student.id,
                        "last_name": student.last_name,
                        "first_name": student.first_name,
                        "email": student.email,
                        "max_score": assignment.max_score,
                        "timestamp": "",
                        "raw_score": 0.0,
                        "late_submission_penalty": 0.0,
                        "score": 0.0,
                    }
                    try:
                        submission = gradebook.find_submission(assignment.name, student.id)
                    except MissingEntry:
                        pass
                    else:
                        penalty = submission.late_submission_penalty
                        row |= {
                            "timestamp": submission.timestamp,
                            "raw_score": submission.score,
                            "late_submission_penalty": penalty,
                            "score": max(0.0, submission.score - penalty),
                        }
                    writer.writerow({key: "" if value is None else str(value) for key, value in row.items()})
