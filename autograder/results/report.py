"""Stage ``report``: per-task results from nbgrader's gradebook, the task results CSV, the per-student table."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader.api import Grade, Gradebook, MissingEntry
from nbgrader.plugins import ExportPlugin

from .. import spreadsheet
from ..course import (
    Course,
    cell_labels,
    grade_id,
    is_autograder_tests,
    is_grade,
    is_solution,
    read_notebook,
    write_atomically,
)
from ..pipeline.execute import KERNEL_DIED, NOT_RUN, TIMEOUT
from ..pipeline.intake.submissions import Submission
from ..table import columns

TASK_STATUSES = {KERNEL_DIED: "kernel died", TIMEOUT: "timeout", NOT_RUN: "not run"}
"""A failed test cell's status by the error the executor gave it (any other is ``partial`` or ``failed``)."""


@dataclass(frozen=True)
class TaskResult:
    """One grade cell of one submission, as the gradebook holds it."""

    grade_id: str
    label: str
    """The task's heading (``Task 2.3 - contiguous strides``) whatever its grade_id
    (:func:`autograder.course.cell_labels`)."""
    score: float
    max_score: float
    autograded: bool
    """True for autograder-tests cells, False for answers an instructor grades by hand."""
    attempted: bool
    """Some solution cell it grades was changed from the release (a written answer: the answer itself)."""
    needs_manual_grade: bool
    status: str
    """``ok`` (full marks), ``partial`` (some of its points, not all), ``failed`` (none),
    ``unattempted`` (the solution cells it checks left as released),
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
    seconds_late: float = 0.0
    """How late by the submission time and the due date in the gradebook (nbgrader's ``total_seconds_late``)."""
    platform_late: bool = False
    """The platform marked it late without giving a time (Canvas's ``_LATE_``)."""

    @property
    def score(self) -> float:
        return sum(task.score for task in self.tasks)

    @property
    def max_score(self) -> float:
        return sum(task.max_score for task in self.tasks)

    @property
    def needs_manual_grade(self) -> bool:
        return any(task.needs_manual_grade for task in self.tasks)

    @property
    def late(self) -> str:
        """How late, as the task results say it: by how much where a time is known (``6h 30min``), else
        :data:`MARKED_LATE` where the platform marked it late, else empty (on time, or not known). No time is
        ever made up."""
        if self.seconds_late > 0:
            return duration(self.seconds_late)
        return MARKED_LATE if self.platform_late else ""


MARKED_LATE = "late (platform mark, no time)"
"""The late column of a submission the platform marked late (Canvas's ``_LATE_``) without a time."""

SUBMISSIONS_FILE = "gradebook.submissions.json"
"""What intake knew of each graded submission and the gradebook has no field for, kept beside it (git-ignored like
the gradebook) so that every later report has it: ``{"<assignment>/<student>": {"status": ..., "notes": [...],
"platform_late": bool}}`` from the batch that graded it last (:func:`remember`)."""


def collect(course: Course, submissions: list[Submission]) -> list[SubmissionResult]:
    """Read the grades of each submission from the gradebook (after nbgrader autograde ran), in order.

    The gradebook is opened once, and each assignment's source notebook read
    once: what each grade cell is (autograded or manual, its label, and its place in the
    notebook) comes from source/, never from the student's copy.
    """
    sources: dict[str, _Source] = {}
    with Gradebook(course.db_url) as gradebook:
        return [
            _read(
                course,
                gradebook,
                sources,
                SubmissionResult(s.student_id, s.assignment_id, s.status, s.notes, platform_late=s.platform_late),
            )
            for s in submissions
        ]


def gradebook_results(course: Course) -> list[SubmissionResult]:
    """Every submission of the course's gradebook (every batch graded so far), with the status, notes and platform
    late mark of the batch that graded it last (:data:`SUBMISSIONS_FILE`; empty for one graded before it was kept),
    and those that nbgrader could not grade; by assignment, then student.

    The gradebook must exist (an SQLite one is not created here: :func:`autograder.course.gradebook_file_missing`).
    """
    remembered = _remembered(course)
    sources: dict[str, _Source] = {}
    with Gradebook(course.db_url) as gradebook:
        keys = {
            (assignment.name, submission.student_id)
            for assignment in gradebook.assignments
            for submission in gradebook.assignment_submissions(assignment.name)
        }
        keys |= {tuple(key.split("/", 1)) for key in remembered}
        results = []
        for assignment_id, student_id in sorted(keys):
            known = remembered.get(f"{assignment_id}/{student_id}", {})
            result = SubmissionResult(
                student_id,
                assignment_id,
                known.get("status", ""),
                list(known.get("notes", [])),
                platform_late=bool(known.get("platform_late", False)),
            )
            results.append(_read(course, gradebook, sources, result))
        return results


def remember(course: Course, results: list[SubmissionResult]) -> Path:
    """Record each result's status, intake notes and platform late mark in :data:`SUBMISSIONS_FILE` (a student's
    record replaced by a new batch's; a result of no assignment, ``nothing graded``, is the batch's alone).
    Returns the file's path. Written whole and then renamed, so a crash leaves the old one."""
    path = course.root / SUBMISSIONS_FILE
    records = _remembered(course)
    for result in results:
        if result.assignment_id in course.assignment_ids():
            records[f"{result.assignment_id}/{result.student_id}"] = {
                "status": result.status,
                "notes": [note for note in result.notes if not note.endswith(NBGRADER_LATE)],
                "platform_late": result.platform_late,
            }
    write_atomically(path, json.dumps(records, indent=1, sort_keys=True))
    return path


NBGRADER_LATE = "(nbgrader)"
"""The end of the note that says how late the gradebook's times make a submission (read again on each report)."""


def _remembered(course: Course) -> dict[str, dict]:
    path = course.root / SUBMISSIONS_FILE
    return json.loads(path.read_text()) if path.exists() else {}


@dataclass(frozen=True)
class _Source:
    """What an assignment's source notebook says of its grade cells."""

    cells: dict[str, nbformat.NotebookNode]
    labels: dict[str, str]
    tested: dict[str, set[str]]


def _read(
    course: Course,
    gradebook: Gradebook,
    sources: dict[str, _Source],
    result: SubmissionResult,
) -> SubmissionResult:
    """``result`` with its tasks and lateness (a note too) from the gradebook and its autograded notebook (status
    ``not graded`` where there is none); ``sources`` caches each assignment's :class:`_Source`."""
    student_id, assignment_id = result.student_id, result.assignment_id
    autograded = course.root / "autograded" / student_id / assignment_id / f"{assignment_id}.ipynb"
    try:
        notebook = gradebook.find_submission_notebook(assignment_id, assignment_id, student_id)
    except MissingEntry:
        notebook = None
    if notebook is None or not autograded.exists():
        result.status = "not graded"
        return result
    if assignment_id not in sources:
        path = course.source_notebook(assignment_id)
        source = read_notebook(path) if path.exists() else nbformat.v4.new_notebook()
        sources[assignment_id] = _Source(
            {grade_id(cell): cell for cell in source.cells if is_grade(cell)}, cell_labels(source), answers_tested(source)
        )
    known = sources[assignment_id]
    result.seconds_late = float(notebook.assignment.total_seconds_late)
    if result.seconds_late > 0:
        result.notes.append(f"late by {duration(result.seconds_late)} {NBGRADER_LATE}")
    order = list(known.cells)
    grades = sorted(notebook.grades, key=lambda g: order.index(g.name) if g.name in order else len(order))
    executed = read_notebook(autograded)
    errors = {
        grade_id(cell): {output.get("ename") for output in cell.get("outputs", [])}
        for cell in executed.cells
        if is_grade(cell)
    }
    unanswered = {c.name for c in notebook.comments if c.auto_comment == UNANSWERED}
    tasks = []
    for grade in grades:
        cell = known.cells.get(grade.name)
        tested = known.tested.get(grade.name, set())
        tasks.append(
            TaskResult(
                grade_id=grade.name,
                label=known.labels.get(grade.name, grade.name),
                score=float(grade.score),
                max_score=float(grade.max_score),
                autograded=cell is not None and is_autograder_tests(cell),
                attempted=not (tested or {grade.name}) <= unanswered,
                needs_manual_grade=bool(grade.needs_manual_grade),
                status=_task_status(
                    grade,
                    cell,
                    errors.get(grade.name, set()),
                    result.status,
                    unattempted=bool(tested) and tested <= unanswered,
                ),
            )
        )
    result.tasks = tasks
    return result


UNANSWERED = "No response."
"""nbgrader's auto_comment on a solution cell left as released (``SaveAutoGrades._add_comment``)."""


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
    failed = "partial" if grade.score > 0 else "failed"
    return next((status for ename, status in TASK_STATUSES.items() if ename in enames), failed)


TASK_COLUMNS = [
    "assignment",
    "student_id",
    "grade_id",
    "task",
    "kind",
    "score",
    "max_score",
    "attempted",
    "needs_manual_grade",
    "status",
    "late",
    "submission_status",
    "notes",
]


def write_task_results(results: list[SubmissionResult], path: Path) -> Path:
    """Write one CSV row per (submission, grade cell): the one writer of every task results file (a batch's
    ``task_results.csv``, the whole gradebook's ``task_results_all.csv``). Returns ``path``.

    ``task`` is the task's label, ``status`` its :attr:`TaskResult.status`, ``late`` the submission's
    :attr:`SubmissionResult.late`, ``submission_status`` and ``notes`` the submission's. A submission without
    grades (nbgrader could not grade it, or nothing of the student's was taken) gets one row with an empty grade_id
    and its own status. No cell is a formula to a spreadsheet (:func:`autograder.spreadsheet.cell`).
    """
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(TASK_COLUMNS)
        for result in results:
            notes = "; ".join(result.notes)
            for task in result.tasks or [None]:
                cells = ["", "", "", "", "", "", "", result.status]
                if task is not None:
                    kind = "autograded" if task.autograded else "manual"
                    cells = [task.grade_id, task.label, kind, f"{task.score:g}", f"{task.max_score:g}"]
                    cells += [str(task.attempted).lower(), str(task.needs_manual_grade).lower(), task.status]
                row = [result.assignment_id, result.student_id, *cells, result.late, result.status, notes]
                writer.writerow([spreadsheet.cell(value) for value in row])
    return path


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
    nbgrader's (default ``grades.csv``); ``--student``/``--assignment`` filter. A text cell a spreadsheet would
    run as a formula (a name or e-mail a student wrote on the platform) is made text
    (:func:`autograder.spreadsheet.cell`).
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
                    writer.writerow(
                        {key: "" if value is None else str(spreadsheet.cell(value)) for key, value in row.items()}
                    )
