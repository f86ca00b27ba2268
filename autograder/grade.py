"""Stage ``grade``: a download of submissions through nbgrader's real pipeline.

``nbgrader generate_assignment`` into a scratch release folder, a request to
the run's nbgrader process (keeps the gradebook's grade cells in step with
source/; not asked again while source/ and the gradebook are as it left them,
see :func:`update_gradebook`) -> intake (the download's shape
read, every file in the manifest, each student mapped to a course id, each
chosen notebook validated and normalised to that release, in submitted/; see
:mod:`autograder.intake` and :mod:`autograder.structure`) -> every student of
the download in the gradebook -> the batch (every notebook executed
concurrently, :mod:`autograder.batch`), while one nbgrader process
(:mod:`autograder.session`) autogrades each submission as soon as its
notebooks are executed (taking the batch's outputs) and others generate its
feedback -> export (grades.csv, quoted by
:class:`autograder.report.QuotedCsvExport`) -> per-task results
(task_results.csv) from the gradebook. The manifest (manifest.csv) and the
student ids (student_ids.csv) are written beside them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat
import nbgrader
from jupyter_core.paths import jupyter_config_path
from nbgrader.api import Gradebook, MissingEntry

from . import intake, report, sandbox, session
from .batch import BatchRun
from .course import Course, CourseError, generate_assignment, nbgrader_errors, read_notebook
from .execute import STORE
from .session import PER_SUBMISSION_ERROR

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
    """Grade every submission in ``download`` (a folder or zip, see :mod:`autograder.intake`).

    ``format`` forces the download's shape, ``roster`` maps its students and
    ``assignment`` names the assignment of a whole download (see
    :func:`autograder.intake.opened`). The download is only read; a
    folder that is or lies in the course's submitted/, autograded/ or
    feedback/ is refused.

    Students' failures are results, not errors: a submission nbgrader cannot
    grade is reported with status ``not graded`` and the batch goes on.
    Kernels run in the sandbox (:mod:`autograder.sandbox`); ``isolated=False``
    (the instructor's explicit opt-out) runs them as plain processes, and
    every result's notes say so. ``workers``, ``scheduler``, ``no_cache`` (execute every notebook again,
    stored executions ignored) and ``progress``: see :func:`autograder.batch.execute`.

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
    grades_csv = course.root / "grades.csv"
    # nbgrader's processes start now, while the download is read and placed.
    with session.Passes(course, isolated=isolated, workers=workers, feedback=True) as nbgrader:
        release = functools.cache(functools.partial(update_gradebook, course, nbgrader=nbgrader.nbgrader))
        with intake.opened(download, course=course, release=release, **options) as found:
            if not found.submissions:
                raise _nothing_to_grade(download, found)
            for submission in found.submissions:
                intake.place(course, submission, release=release(submission.assignment_id))
        manifest_csv, student_ids_csv = course.root / "manifest.csv", course.root / "student_ids.csv"
        intake.write_manifest(found.manifest, manifest_csv)
        intake.write_mapping(found.mappings, student_ids_csv)
        _enrol(course, found)
        passes = nbgrader.run(
            found.submissions, scheduler=scheduler, no_cache=no_cache, progress=progress, export_to=grades_csv
        )

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


def _unique_students(found: intake.Intake) -> list[intake.roster.Mapping]:
    seen: dict[str, intake.roster.Mapping] = {}
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


RELEASES = Path(STORE) / "releases"
"""Folder of the course directory holding the release notebooks :func:`update_gradebook` generated, by source."""


def update_gradebook(
    course: Course, assignment_id: str, *, db_url: str | None = None, nbgrader: session.Session | None = None
) -> nbformat.NotebookNode:
    """Record the assignment's grade cells (from source/) in the gradebook at ``db_url`` (default: the course's;
    :func:`survey` passes a scratch one), by a request to the ``nbgrader`` session where one is given (no nbgrader
    start-up, about 1.5 s of CPU), else by the ``nbgrader generate_assignment`` command.

    Generates into a scratch release folder, so release/ is left as it is. With the course's gradebook, keeps what
    it generated in :data:`RELEASES`, under :func:`source_key`, with a digest of what nbgrader then recorded in the
    gradebook (:func:`recorded_cells`); when both are there and the gradebook still holds exactly that (a run again
    on the same source/), nothing is generated (the command takes 2 to 6 s). A scratch gradebook leaves the course
    directory as it is.
    Returns the release notebook generated (the template submissions are normalised to).

    Raises:
        CourseError: nbgrader refused (its log is quoted).
    """
    if db_url is not None:
        with tempfile.TemporaryDirectory(prefix="release-") as scratch:
            return read_notebook(_generated(course, assignment_id, Path(scratch), db_url, nbgrader))
    kept = course.root / RELEASES / f"{assignment_id}-{source_key(course, assignment_id)}.ipynb"
    digest = kept.with_suffix(".gradebook")
    if kept.exists() and digest.exists() and digest.read_text() == recorded_cells(course.db_url, assignment_id):
        return read_notebook(kept)
    with tempfile.TemporaryDirectory(prefix="release-") as scratch:
        generated = _generated(course, assignment_id, Path(scratch), course.db_url, nbgrader)
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(generated, kept)
        digest.write_text(recorded_cells(course.db_url, assignment_id))
        return read_notebook(kept)


def _generated(
    course: Course, assignment_id: str, scratch: Path, db_url: str, nbgrader: session.Session | None
) -> Path:
    """The release notebook generated into ``scratch/<id>/`` (see :func:`update_gradebook`)."""
    if nbgrader is None:
        folder = generate_assignment(course, assignment_id, release_dir=scratch, db_url=db_url)
    else:
        folder = scratch / assignment_id
        outcome = nbgrader.generate_assignment(assignment_id, release_dir=scratch, db_url=db_url).result()
        if not outcome.success:
            quoted = nbgrader_errors(outcome.log + outcome.error) or outcome.tail().splitlines()
            raise CourseError(f"nbgrader generate_assignment {assignment_id} failed:\n  " + "\n  ".join(quoted))
    return folder / f"{assignment_id}.ipynb"


def source_key(course: Course, assignment_id: str) -> str:
    """SHA-256 (hex) of what ``nbgrader generate_assignment`` makes a release from: nbgrader's version, the
    configuration files it reads (the course's and Jupyter's), and every file of ``source/<id>/`` (its path and
    contents; editors' ``.ipynb_checkpoints`` and ``__pycache__`` left out; the course's own paths relative to it)."""
    digest = hashlib.sha256(f"{nbgrader.__version__}\0{assignment_id}\0".encode())
    configs = [Path(folder) / name for folder in jupyter_config_path() for name in CONFIG_FILES]
    files = [course.root / "nbgrader_config.py", *configs, *sorted((course.source / assignment_id).rglob("*"))]
    for path in files:
        if path.is_file() and not {".ipynb_checkpoints", "__pycache__"} & set(path.parts):
            name = path.relative_to(course.root) if path.is_relative_to(course.root) else path
            digest.update(f"{name}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()


CONFIG_FILES = ("nbgrader_config.py", "nbgrader_config.json")
"""The configuration files nbgrader reads from each of Jupyter's configuration folders."""


def recorded_cells(db_url: str, assignment_id: str) -> str:
    """SHA-256 (hex) of what the gradebook at ``db_url`` holds of the assignment's notebooks: each one's kernelspec
    and its grade, solution, task and source cells as nbgrader's ``SaveCells`` records them (names, points, cell
    types, locks, sources, checksums); empty when it holds no such assignment, or is an SQLite file not there (it
    is not created: nbgrader does that, running ``alembic``)."""
    if db_url.startswith("sqlite:///") and not Path(db_url.removeprefix("sqlite:///")).exists():
        return ""
    with Gradebook(db_url) as gradebook:
        try:
            notebooks = gradebook.find_assignment(assignment_id).notebooks
        except MissingEntry:
            return ""
        recorded = [
            [
                notebook.name,
                notebook.kernelspec,
                sorted((c.name, c.max_score, c.cell_type) for c in notebook.grade_cells),
                sorted(c.name for c in notebook.solution_cells),
                sorted((c.name, c.max_score, c.cell_type) for c in notebook.task_cells),
                sorted((c.name, c.cell_type, c.locked, c.source, c.checksum) for c in notebook.source_cells),
            ]
            for notebook in sorted(notebooks, key=lambda notebook: notebook.name)
        ]
    return hashlib.sha256(json.dumps(recorded).encode()).hexdigest() if recorded else ""


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
