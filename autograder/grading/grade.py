"""Stage ``grade``: a download of submissions through nbgrader's real pipeline.

``nbgrader generate_assignment`` into a scratch release folder, a request to
the run's nbgrader process (keeps the gradebook's grade cells in step with
source/; not asked again while source/ and the gradebook are as it left them,
see :func:`autograder.pipeline.releases.update_gradebook`; the batch's workers start the
assignment's reference run at the same time) -> intake (the download's shape
read, every file in the manifest, each student mapped to a course id, each
chosen notebook validated and normalised to that release, in submitted/; see
:mod:`autograder.pipeline.intake` and :mod:`autograder.pipeline.structure`) -> every student of
the download in the gradebook -> the batch (every notebook executed
concurrently, :mod:`autograder.pipeline.batch`), while one nbgrader process
(:mod:`autograder.grading.session`) autogrades each submission as soon as its
notebooks are executed (taking the batch's outputs) and others generate its
feedback -> export (grades.csv, quoted by
:class:`autograder.results.report.QuotedCsvExport`) -> per-task results
(task_results.csv) from the gradebook. The manifest (manifest.csv) and the
student ids (student_ids.csv) are written beside them.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import Gradebook

from ..pipeline.intake import submissions as intake
from ..results import lms, report
from ..kernel import sandbox
from . import session
from ..pipeline.batch import BatchRun
from ..course import Course, CourseError
from ..pipeline.releases import update_gradebook
from ..pipeline.nbgrader_process import Session, export_grades
from .session import PER_SUBMISSION_ERROR

GRADES_CSV = "grades.csv"
"""nbgrader's export of the whole gradebook, in the course directory
(:class:`autograder.results.report.QuotedCsvExport`)."""

NOT_ISOLATED = "graded without isolation (--no-sandbox)"
"""The note every result of a run without the sandbox carries."""


@dataclass
class Grading:
    """What a grading run produced."""

    results: list[report.SubmissionResult]
    intake: intake.Intake
    manifest_csv: Path
    student_ids_csv: Path
    grades_csv: Path
    task_results_csv: Path
    feedback: Path
    batch: BatchRun


def grade(
    course: Course,
    download: Path,
    *,
    isolated: bool = True,
    workers: int | None = None,
    scheduler: str | None = None,
    format: str | None = None,
    roster: intake.Roster | None = None,
    assignment: str | None = None,
    no_cache: bool = False,
    progress: Callable[[str], None] = lambda line: None,
) -> Grading:
    """Grade every submission in ``download`` (a folder or zip, see :mod:`autograder.pipeline.intake`).

    ``format`` forces the download's shape, ``roster`` maps its students and
    ``assignment`` names the assignment of a whole download (see
    :func:`autograder.pipeline.intake.submissions.opened`). The download is only read; a
    folder that is or lies in the course's submitted/, autograded/ or
    feedback/ is refused.

    Students' failures are results, not errors: a submission nbgrader cannot
    grade is reported with status ``not graded`` and the batch goes on.
    Kernels run in the sandbox (:mod:`autograder.kernel.sandbox`); ``isolated=False``
    (the instructor's explicit opt-out) runs them as plain processes, and
    every result's notes say so. ``workers``, ``scheduler``, ``no_cache`` (execute every notebook again,
    stored executions ignored) and ``progress``: see :func:`autograder.pipeline.batch.execute`.

    Raises:
        CourseError: grading itself cannot run: the sandbox is unavailable
            (and not opted out of), no such download, a course folder given as
            the download, nothing gradable in it,
            or nbgrader cannot set up the assignment, fails other than on
            single submissions, or cannot export.
        ValueError, OSError: no Dask scheduler at ``scheduler``.
    """
    intake.refuse_course_folders(course, download)
    if isolated and (reason := sandbox.problem()):
        raise CourseError(
            f"{reason}.\nGrading runs every student's kernel in a sandbox. To grade without isolation "
            "(students' code then runs with your rights and can read the hidden tests), pass --no-sandbox."
        )
    options = {"format": format, "roster": roster, "assignment": assignment}
    grades_csv = course.root / GRADES_CSV
    # nbgrader's processes start now, while the download is read and placed.
    with session.Passes(course, isolated=isolated, workers=workers, feedback=True, no_cache=no_cache) as nbgrader:
        release = functools.cache(nbgrader.release)
        with intake.opened(download, course=course, release=release, **options) as found:
            if not found.submissions:
                raise _nothing_to_grade(download, found)
            for submission in found.submissions:
                intake.place(course, submission, release=release(submission.assignment_id))
        manifest_csv, student_ids_csv = course.root / "manifest.csv", course.root / "student_ids.csv"
        intake.write_manifest(found.manifest, manifest_csv)
        intake.write_mapping(found.mappings, student_ids_csv)
        lms.remember_identities(course, mappings=found.mappings, submissions=found.submissions, left_out=found.left_out)
        _enrol(course, found)
        passes = nbgrader.run(found.submissions, scheduler=scheduler, progress=progress, export_to=grades_csv)

    results = report.collect(course, found.submissions)
    graded = {result.student_id for result in results}
    results += [
        report.SubmissionResult(
            m.student.student_id,
            "-",
            "nothing graded",
            ["no notebook taken: see manifest.csv", *found.left_out.get(m.student.student_id, [])],
        )
        for m in _unique_students(found)
        if m.student.student_id not in graded
    ]
    for result in results:
        if result.status == "not graded":
            submitted = course.root / "submitted" / result.student_id / result.assignment_id
            result.notes.append(_log_excerpt(passes.log, submitted))
        if not isolated:
            result.notes.append(NOT_ISOLATED)
    task_results_csv = course.root / "task_results.csv"
    report.write_task_results(results, task_results_csv)
    report.remember(course, results)  # what intake knew (status, notes, a platform's late mark), for later reports
    return Grading(
        results=results,
        intake=found,
        manifest_csv=manifest_csv,
        student_ids_csv=student_ids_csv,
        grades_csv=grades_csv,
        task_results_csv=task_results_csv,
        feedback=course.root / "feedback",
        batch=passes.batch,
    )


def write_grades_csv(course: Course) -> Path:
    """Write grades.csv again from the gradebook as it is now (hand grades given in formgrader included), by the
    export a grading run ends with (:func:`autograder.pipeline.nbgrader_process.export_grades`). Returns its path.

    Raises:
        CourseError: nbgrader cannot export (its log is quoted).
    """
    path = course.root / GRADES_CSV
    with Session(course) as nbgrader:
        export_grades(nbgrader, path)
    return path


def survey(
    course: Course,
    download: Path,
    *,
    format: str | None = None,
    roster: intake.Roster | None = None,
    assignment: str | None = None,
) -> intake.Intake:
    """What :func:`grade` would take from ``download``, grading nothing (``grade --dry-run``).

    Release notebooks are generated into a scratch folder with a scratch
    gradebook: the course's gradebook, submitted/ and results are not touched.

    Raises:
        CourseError: as :func:`grade` before it grades (no such download, a course folder, nbgrader refused).
    """
    intake.refuse_course_folders(course, download)
    with tempfile.TemporaryDirectory(prefix="survey-") as scratch:
        db_url = f"sqlite:///{Path(scratch) / 'gradebook.db'}"
        release = functools.cache(functools.partial(update_gradebook, course, db_url=db_url))
        options = {"format": format, "roster": roster, "assignment": assignment}
        with intake.opened(download, course=course, release=release, **options) as found:
            return found


def _nothing_to_grade(download: Path, found: intake.Intake) -> CourseError:
    problems = "\n  ".join(f"{row.file}: {row.note}" for row in found.manifest[:10]) or "(no files at all)"
    return CourseError(f"no submissions in {download} ({found.detected})\n  {problems}")


def _unique_students(found: intake.Intake) -> list[intake.Mapping]:
    seen: dict[str, intake.Mapping] = {}
    for mapping in found.mappings:
        seen.setdefault(mapping.student.student_id, mapping)
    return list(seen.values())


def _enrol(course: Course, found: intake.Intake) -> None:
    """Every student of the download in the gradebook (with the roster's names), so each has a row in grades.csv."""
    with Gradebook(course.db_url) as gradebook:
        for mapping in _unique_students(found):
            student = mapping.student
            names = {"first_name": student.first_name, "last_name": student.last_name, "email": student.email}
            gradebook.update_or_create_student(student.student_id, **{k: v for k, v in names.items() if v})


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
