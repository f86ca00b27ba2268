"""The class's results over the whole gradebook (every batch graded so far, not one): ``report``
and the end of every ``grade``.

Per assignment and grade cell: submissions, attempted, passed, mean score and pass rate, the tasks ranked
by pass rate (``class_results.csv``); one row per submission and grade cell with the task's label, lateness
and the submission's status (``task_results_all.csv``); per assignment a histogram of the scores and a bar
chart of the pass rates (PNG, matplotlib); and the written answers still waiting for a hand grade.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.figure import Figure  # not pyplot: no global state, no display; savefig renders with Agg
from matplotlib.ticker import MaxNLocator
from nbgrader.api import Gradebook

from .course import Course, CourseError, cell_labels, grade_id, is_autograder_tests, read_notebook
from .report import answers_tested, columns, duration

UNANSWERED = "No response."
"""nbgrader's auto_comment on a solution cell left as released (``SaveAutoGrades._add_comment``)."""


@dataclass(frozen=True)
class CellResult:
    """One grade cell of one submission, from the gradebook."""

    assignment_id: str
    student_id: str
    grade_id: str
    label: str
    autograded: bool
    score: float
    max_score: float
    attempted: bool
    """Some solution cell it grades was changed from the release (a written answer: the answer itself)."""
    needs_manual_grade: bool
    seconds_late: float


@dataclass(frozen=True)
class TaskSummary:
    """One grade cell of an assignment over the class."""

    assignment_id: str
    grade_id: str
    label: str
    autograded: bool
    submissions: int
    attempted: int
    passed: int
    """Submissions with full marks (of those graded)."""
    mean_score: float | None
    """Mean score of the graded submissions (None: none graded yet)."""
    max_score: float
    pending: int = 0
    """Submissions whose answer still waits for a hand grade: neither passed nor failed."""

    @property
    def graded(self) -> int:
        """Submissions with a grade (autograded, or graded by hand)."""
        return self.submissions - self.pending

    @property
    def pass_rate(self) -> float | None:
        """passed / graded (None while none is graded: a written answer nobody graded yet did not fail)."""
        return self.passed / self.graded if self.graded else None


@dataclass
class ClassReport:
    """The class's results, and the files written for them (:func:`write_class_report`)."""

    cells: list[CellResult]
    files: list[Path] = field(default_factory=list)

    def tasks(self) -> list[TaskSummary]:
        """Every grade cell of every assignment, per assignment ranked by pass rate, lowest (hardest) first; answers
        waiting for a hand grade count in neither the pass rate nor the mean (a task none of whose answers is graded
        yet comes last)."""
        groups: dict[tuple[str, str], list[CellResult]] = {}
        for cell in self.cells:
            groups.setdefault((cell.assignment_id, cell.grade_id), []).append(cell)
        summaries = []
        for (assignment_id, name), found in groups.items():
            graded = [c for c in found if not c.needs_manual_grade]
            summaries.append(
                TaskSummary(
                    assignment_id=assignment_id,
                    grade_id=name,
                    label=found[0].label,
                    autograded=found[0].autograded,
                    submissions=len(found),
                    attempted=sum(c.attempted for c in found),
                    passed=sum(c.score == c.max_score for c in graded),
                    mean_score=sum(c.score for c in graded) / len(graded) if graded else None,
                    max_score=found[0].max_score,
                    pending=len(found) - len(graded),
                )
            )
        return sorted(summaries, key=lambda t: (t.assignment_id, 2.0 if t.pass_rate is None else t.pass_rate))

    def scores(self) -> dict[str, dict[str, float]]:
        """assignment -> student -> total score."""
        totals: dict[str, dict[str, float]] = {}
        for cell in self.cells:
            student = totals.setdefault(cell.assignment_id, {})
            student[cell.student_id] = student.get(cell.student_id, 0.0) + cell.score
        return totals

    def pending(self) -> list[CellResult]:
        """The answers that still need a hand grade."""
        return [cell for cell in self.cells if cell.needs_manual_grade]

    def summary(self) -> str:
        """The tasks table (hardest first per assignment), the hand grades still to give, and the files."""
        rows = [
            [
                t.assignment_id,
                t.label,
                f"{t.attempted}/{t.submissions}",
                f"{t.passed}/{t.graded}",
                "-" if t.pass_rate is None else f"{t.pass_rate:.0%}",
                "-" if t.mean_score is None else f"{t.mean_score:.2f}/{t.max_score:g}",
                f"{t.pending}" if t.pending else "",
            ]
            for t in self.tasks()
        ]
        headers = ["assignment", "task", "attempted", "passed/graded", "pass rate", "mean", "to grade by hand"]
        text = columns(headers, rows)
        pending = self.pending()
        text += f"\n\n{len(pending)} answer(s) to grade by hand (formgrader)" + "".join(
            f"\n  {c.assignment_id} {c.student_id}: {c.label}" for c in pending
        )
        return text + "".join(f"\n{path}" for path in self.files)


def class_report(course: Course) -> ClassReport:
    """Read every submission's grades from the course's gradebook.

    Labels and what each grade cell tests come from source/ (the grade_id itself where an assignment of the
    gradebook has no source notebook any more).

    Raises:
        CourseError: the course has no gradebook yet (nothing was graded).
    """
    if not (course.root / "gradebook.db").exists():
        raise CourseError(f"no gradebook.db in {course.root}: nothing graded yet (python -m autograder grade ...)")
    cells = []
    with Gradebook(course.db_url) as gradebook:
        for assignment in gradebook.assignments:
            labels, tested, autograded = {}, {}, set()
            if course.source_notebook(assignment.name).exists():
                source = read_notebook(course.source_notebook(assignment.name))
                labels, tested = cell_labels(source), answers_tested(source)
                autograded = {grade_id(c) for c in source.cells if is_autograder_tests(c)}
            for submission in gradebook.assignment_submissions(assignment.name):
                for notebook in submission.notebooks:
                    unanswered = {c.name for c in notebook.comments if c.auto_comment == UNANSWERED}
                    for grade in notebook.grades:
                        answers = tested.get(grade.name) or {grade.name}
                        cells.append(
                            CellResult(
                                assignment_id=assignment.name,
                                student_id=submission.student_id,
                                grade_id=grade.name,
                                label=labels.get(grade.name, grade.name),
                                autograded=grade.name in autograded,
                                score=float(grade.score),
                                max_score=float(grade.max_score),
                                attempted=not answers <= unanswered,
                                needs_manual_grade=bool(grade.needs_manual_grade),
                                seconds_late=float(submission.total_seconds_late),
                            )
                        )
    return ClassReport(cells)


CELL_COLUMNS = [
    "assignment",
    "student_id",
    "grade_id",
    "task",
    "kind",
    "score",
    "max_score",
    "attempted",
    "needs_manual_grade",
    "late",
    "submission_status",
]
SUMMARY_COLUMNS = [
    "assignment",
    "grade_id",
    "task",
    "kind",
    "submissions",
    "attempted",
    "passed",
    "pass_rate",
    "mean_score",
    "max_score",
    "to_grade_by_hand",
]


def write_class_report(course: Course, report: ClassReport, *, batch_csv: Path | None = None) -> list[Path]:
    """Write ``class_results.csv``, ``task_results_all.csv`` and per assignment ``scores_<id>.png`` and
    ``pass_rates_<id>.png`` into the course directory; the paths are also kept in ``report.files``.

    A submission's status (intake's ``ok``, ``repaired``, ...) is not in the gradebook: it comes from the
    batch just graded (``batch_csv``, that batch's task_results.csv), else from the previous
    task_results_all.csv, else it is empty.
    """
    merged = course.root / "task_results_all.csv"
    statuses = {**_statuses(merged), **_statuses(batch_csv)}
    with merged.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CELL_COLUMNS)
        for c in report.cells:
            writer.writerow(
                [
                    c.assignment_id,
                    c.student_id,
                    c.grade_id,
                    c.label,
                    "autograded" if c.autograded else "manual",
                    f"{c.score:g}",
                    f"{c.max_score:g}",
                    str(c.attempted).lower(),
                    str(c.needs_manual_grade).lower(),
                    duration(c.seconds_late) if c.seconds_late > 0 else "",
                    statuses.get((c.assignment_id, c.student_id), ""),
                ]
            )
    summary = course.root / "class_results.csv"
    with summary.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(SUMMARY_COLUMNS)
        for t in report.tasks():
            kind = "autograded" if t.autograded else "manual"
            writer.writerow(
                [t.assignment_id, t.grade_id, t.label, kind, t.submissions, t.attempted, t.passed]
                + ["" if t.pass_rate is None else f"{t.pass_rate:.3f}"]
                + ["" if t.mean_score is None else f"{t.mean_score:.3f}", f"{t.max_score:g}", t.pending]
            )
    report.files = [summary, merged]
    tasks = report.tasks()
    for assignment_id, totals in report.scores().items():
        maximum = sum(t.max_score for t in tasks if t.assignment_id == assignment_id)
        report.files.append(_histogram(course.root / f"scores_{assignment_id}.png", assignment_id, totals, maximum))
        ranked = [t for t in tasks if t.assignment_id == assignment_id and t.autograded]
        report.files.append(_pass_rates(course.root / f"pass_rates_{assignment_id}.png", assignment_id, ranked))
    return report.files


def _statuses(path: Path | None) -> dict[tuple[str, str], str]:
    """(assignment, student) -> submission_status, from a task results CSV (empty if there is none)."""
    if path is None or not path.exists():
        return {}
    with path.open(newline="") as handle:
        return {(row["assignment"], row["student_id"]): row["submission_status"] for row in csv.DictReader(handle)}


def _histogram(path: Path, assignment_id: str, totals: dict[str, float], maximum: float) -> Path:
    figure = Figure(figsize=(6, 3.5), layout="tight")
    axes = figure.subplots()
    axes.hist(list(totals.values()), bins=max(1, math.ceil(maximum)), range=(0, max(1.0, maximum)), edgecolor="white")
    axes.set(title=f"{assignment_id}: scores of {len(totals)} submission(s)", xlabel=f"score (of {maximum:g})")
    axes.set(ylabel="submissions")
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    figure.savefig(path, dpi=100)
    return path


def _pass_rates(path: Path, assignment_id: str, tasks: list[TaskSummary]) -> Path:
    figure = Figure(figsize=(8, 0.4 * len(tasks) + 1.2), layout="tight")
    axes = figure.subplots()
    axes.barh([t.label for t in tasks], [100 * (t.pass_rate or 0.0) for t in tasks], color="tab:green")
    axes.set(title=f"{assignment_id}: pass rate per task, hardest first", xlabel="% of submissions", xlim=(0, 100))
    axes.invert_yaxis()
    figure.savefig(path, dpi=100)
    return path
