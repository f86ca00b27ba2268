"""Stage ``grade``: a download of submissions through nbgrader's real pipeline.

``nbgrader generate_assignment`` into a scratch release folder (keeps the
gradebook's grade cells in step with source/) -> intake (each notebook
validated and normalised to that release, in submitted/; see
:mod:`autograder.structure`) -> the batch (every notebook executed
concurrently, :mod:`autograder.batch`) -> ``nbgrader autograde`` (takes the
batch's outputs) -> ``nbgrader generate_feedback`` -> ``nbgrader export``
(grades.csv) -> per-task results (task_results.csv) from the gradebook.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat

from . import batch, intake, report, sandbox
from .course import Course, CourseError, generate_assignment, nbgrader_failure, read_notebook, run_nbgrader

PER_SUBMISSION_ERROR = "There was an error processing assignment"
"""How nbgrader's log starts the report of a submission it skipped (it goes on with the others)."""


NOT_ISOLATED = "graded without isolation (--no-sandbox)"
"""The note every result of a run without the sandbox carries."""


@dataclass
class Grading:
    """What a grading run produced."""

    results: list[report.SubmissionResult]
    ignored: list[str]
    grades_csv: Path
    task_results_csv: Path
    feedback: Path
    batch: batch.BatchRun


def grade(
    course: Course,
    download: Path,
    *,
    isolated: bool = True,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> Grading:
    """Grade every submission in ``download`` (a folder or zip, see :mod:`autograder.intake`).

    Students' failures are results, not errors: a submission nbgrader cannot
    grade is reported with status ``not graded`` and the batch goes on.
    Kernels run in the sandbox (:mod:`autograder.sandbox`); ``isolated=False``
    (the instructor's explicit opt-out) runs them as plain processes, and
    every result's notes say so. ``workers``, ``scheduler`` and ``progress``:
    see :func:`autograder.batch.execute`.

    Raises:
        CourseError: grading itself cannot run: the sandbox is unavailable
            (and not opted out of), no such download, nothing gradable in it,
            or nbgrader cannot set up the assignment, fails other than on
            single submissions, or cannot export.
        ValueError, OSError: no Dask scheduler at ``scheduler``.
    """
    if isolated and (reason := sandbox.problem()):
        raise CourseError(
            f"{reason}.\nGrading runs every student's kernel in a sandbox. To grade without isolation "
            "(students' code then runs with your rights and can read the hidden tests), pass --no-sandbox."
        )
    env = {} if isolated else {sandbox.DISABLED_ENV: "1"}
    assignment_ids = course.assignment_ids()
    with intake.opened(download) as folder:
        found = intake.find_submissions(folder, assignment_ids=assignment_ids)
        if not found.submissions:
            problems = "\n  ".join(found.ignored[:10]) or "(no notebooks at all)"
            raise CourseError(
                f"no submissions in {download}: expected <student_id>/<assignment_id>/<notebook>.ipynb "
                f"with assignment ids {', '.join(assignment_ids)}\n  {problems}"
            )
        assignments = sorted({s.assignment_id for s in found.submissions})
        releases = {assignment_id: update_gradebook(course, assignment_id) for assignment_id in assignments}
        for submission in found.submissions:
            intake.place(course, submission, release=releases[submission.assignment_id])

    executed = batch.execute(
        course, found.submissions, isolated=isolated, workers=workers, scheduler=scheduler, progress=progress
    )
    # One nbgrader process for all assignments ("*"); submissions already autograded are skipped by nbgrader.
    progress("nbgrader autograde")
    autograde = run_nbgrader(course, "autograde", "*", env=env)
    if autograde.returncode != 0 and PER_SUBMISSION_ERROR not in autograde.stdout + autograde.stderr:
        raise nbgrader_failure(autograde, "nbgrader autograde")
    progress("nbgrader generate_feedback")
    feedback = run_nbgrader(course, "generate_feedback", "*", env=env)
    log = autograde.stdout + autograde.stderr + feedback.stdout + feedback.stderr

    grades_csv = course.root / "grades.csv"
    export = run_nbgrader(course, "export", f"--to={grades_csv}")
    if export.returncode != 0:
        raise nbgrader_failure(export, "nbgrader export")

    results = report.collect(course, found.submissions)
    for result in results:
        if result.status == "not graded":
            submitted = course.root / "submitted" / result.student_id / result.assignment_id
            result.notes.append(_log_excerpt(log, submitted))
        if not isolated:
            result.notes.append(NOT_ISOLATED)
    task_results_csv = course.root / "task_results.csv"
    report.write_task_results(results, task_results_csv)
    return Grading(
        results=results,
        ignored=found.ignored,
        grades_csv=grades_csv,
        task_results_csv=task_results_csv,
        feedback=course.root / "feedback",
        batch=executed,
    )


def update_gradebook(course: Course, assignment_id: str) -> nbformat.NotebookNode:
    """Record the assignment's grade cells (from source/) in the course gradebook.

    Generates into a scratch release folder, so release/ is left as it is.
    Returns the release notebook generated (the template submissions are normalised to).

    Raises:
        CourseError: nbgrader refused (its log is quoted).
    """
    with tempfile.TemporaryDirectory(prefix="release-") as scratch:
        folder = generate_assignment(course, assignment_id, release_dir=Path(scratch), db_url=course.db_url)
        return read_notebook(folder / f"{assignment_id}.ipynb")


def _log_excerpt(log: str, submitted: Path) -> str:
    """The exception nbgrader's log reports for one submission folder (or a pointer to the log)."""
    lines = log.splitlines()
    marker = f"{PER_SUBMISSION_ERROR}: {submitted}"
    for start, line in enumerate(lines):
        if line.rstrip().endswith(marker):
            block = []
            for following in lines[start + 1 :]:
                if following.startswith("[") and "Traceback" not in following:
                    break
                block.append(following.strip())
            reasons = [text for text in block if text]
            if reasons:
                return f"nbgrader: {reasons[-1]}"
    return "nbgrader produced no graded notebook; run `nbgrader autograde` by hand to see why"
