"""The class's results over the whole gradebook (every batch graded so far, not one): ``report``
and the end of every ``grade``.

Per assignment and grade cell: submissions, attempted, passed, mean score and pass rate, the tasks ranked
by pass rate (``class_results.csv``); one row per submission and grade cell (``task_results_all.csv``, written by
:func:`autograder.results.report.write_task_results` like a batch's ``task_results.csv``, from
:func:`autograder.results.report.gradebook_results`); per assignment a histogram of the scores and a bar
chart of the pass rates (PNG, matplotlib); and the written answers still waiting for a hand grade.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.figure import Figure  # not pyplot: no global state, no display; savefig renders with Agg
from matplotlib.ticker import MaxNLocator

from .. import spreadsheet
from ..course import Course, require_gradebook
from .report import SubmissionResult, TaskResult, columns, gradebook_results, write_task_results


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

    results: list[SubmissionResult]
    files: list[Path] = field(default_factory=list)

    def cells(self) -> list[tuple[SubmissionResult, TaskResult]]:
        """Every grade cell of every submission, with its submission."""
        return [(result, task) for result in self.results for task in result.tasks]

    def tasks(self) -> list[TaskSummary]:
        """Every grade cell of every assignment, per assignment ranked by pass rate, lowest (hardest) first; answers
        waiting for a hand grade count in neither the pass rate nor the mean (a task none of whose answers is graded
        yet comes last)."""
        groups: dict[tuple[str, str], list[TaskResult]] = {}
        for result, task in self.cells():
            groups.setdefault((result.assignment_id, task.grade_id), []).append(task)
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
        for result in self.results:
            if result.tasks:
                totals.setdefault(result.assignment_id, {})[result.student_id] = result.score
        return totals

    def pending(self) -> list[tuple[SubmissionResult, TaskResult]]:
        """The answers that still need a hand grade, with their submissions."""
        return [(result, task) for result, task in self.cells() if task.needs_manual_grade]

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
            f"\n  {result.assignment_id} {result.student_id}: {task.label}" for result, task in pending
        )
        return text + "".join(f"\n{path}" for path in self.files)


def class_report(course: Course) -> ClassReport:
    """Read every submission's grades from the course's gradebook (:func:`autograder.results.report.gradebook_results`).

    Raises:
        CourseError: the course has no gradebook yet (nothing was graded).
    """
    require_gradebook(course)
    return ClassReport(gradebook_results(course))


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


def write_class_report(course: Course, report: ClassReport) -> list[Path]:
    """Write ``class_results.csv``, ``task_results_all.csv`` (:func:`autograder.results.report.write_task_results`)
    and per assignment ``scores_<id>.png`` and ``pass_rates_<id>.png`` into the course directory; the paths are also
    kept in ``report.files``. No CSV cell is a formula to a spreadsheet (:func:`autograder.spreadsheet.cell`)."""
    merged = write_task_results(report.results, course.root / "task_results_all.csv")
    summary = course.root / "class_results.csv"
    with summary.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(SUMMARY_COLUMNS)
        for t in report.tasks():
            kind = "autograded" if t.autograded else "manual"
            row = [t.assignment_id, t.grade_id, t.label, kind, t.submissions, t.attempted, t.passed]
            row += ["" if t.pass_rate is None else f"{t.pass_rate:.3f}"]
            row += ["" if t.mean_score is None else f"{t.mean_score:.3f}", f"{t.max_score:g}", t.pending]
            writer.writerow([spreadsheet.cell(value) for value in row])
    report.files = [summary, merged]
    tasks = report.tasks()
    for assignment_id, totals in report.scores().items():
        maximum = sum(t.max_score for t in tasks if t.assignment_id == assignment_id)
        report.files.append(_histogram(course.root / f"scores_{assignment_id}.png", assignment_id, totals, maximum))
        ranked = [t for t in tasks if t.assignment_id == assignment_id and t.autograded]
        report.files.append(_pass_rates(course.root / f"pass_rates_{assignment_id}.png", assignment_id, ranked))
    return report.files


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
