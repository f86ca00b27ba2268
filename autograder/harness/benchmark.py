"""Stage ``benchmark``: our grading against stock nbgrader's, same batch, same machine, one run.

The batch: ``students`` generated students, each submitting all the course's
notebooks; for every assignment, even-numbered students hand in the reference
solution and odd-numbered ones a wrong answer from ``tests/submissions``
(cycling through them), so both passing and failing tests are timed. Each
notebook ends with a markdown cell naming its student, so no two are
identical (the batch would execute identical notebooks once, and real
students' notebooks differ).

Each side gets its own scratch course directory and gradebook, the assignments' grade cells recorded in it
(untimed). Timed:

- **the references**, on their own before the rest: each assignment's
  reference solution executed for its check records, as the batch does the
  first time it grades a version of source/ and ``checks.py`` (it stores them,
  them); the sides below that need them read the same stored records;
- **stock autograde**: ``nbgrader autograde "*"`` over the placed submissions (placed untimed) with nbgrader's
  own autograde preprocessors and ``Execute`` (kernels as plain processes, graceful shutdown), one notebook at a
  time, and the course's verdict step (:class:`autograder.pipeline.verdict.CompareRecords`) right after
  ``Execute``: the course's hidden tests hand the kernel no expected value, so nbgrader alone cannot judge them;
- **stock feedback**: then ``nbgrader generate_feedback "*"`` with nbgrader's own feedback preprocessors and
  nbconvert's ``HTMLExporter`` as nbgrader configures it;
- **ours, end to end**: :func:`autograder.grading.grade.grade` of the download as an instructor runs it (intake,
  the batch of :mod:`autograder.pipeline.batch` with kernels in the sandbox unless ``isolated`` is False, each
  submission autograded as soon as it is executed by one nbgrader process with the course's preprocessors,
  feedback pages, grades.csv and the reports), the references stored and, as on every side, the assignments' grade
  cells recorded in the gradebook beforehand (untimed);
- **ours, a course version's first run**: the same in a course with no stored references, which ``grade`` runs
  while it reads the download.

The report gives stock's time over ours end to end (stock's autograde plus feedback) and for a first run (stock's
end to end plus the reference runs it reads). Then every grade cell's score in the three gradebooks is compared,
and every submission must have a feedback page on each side.
"""

from __future__ import annotations

import concurrent.futures
import copy
import json
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook
from nbgrader.converters import Autograde, GenerateFeedback

from ..pipeline import batch
from ..pipeline.intake import submissions as intake
from ..grading import grade
from ..pipeline import verdict
from ..course import Course, CourseError, copy_course, nbgrader_failure, run_nbgrader
from ..pipeline.releases import update_gradebook
from ..authoring.samples import Sample, samples, write_download


def stock_config() -> str:
    """Appended to the stock side's nbgrader_config.py: nbgrader's own default autograde preprocessors (read
    from nbgrader itself), the course's verdict right after ``Execute`` (without it no hidden check is judged),
    ``Execute``'s default graceful kernel shutdown, and nbgrader's own feedback: its default preprocessors and
    nbconvert's ``HTMLExporter`` with none of the course's (which hide the hidden tests and sanitise the page)."""
    defaults = Autograde.class_traits()["autograde_preprocessors"].default()
    names = [f"{preprocessor.__module__}.{preprocessor.__name__}" for preprocessor in defaults]
    after = next(n for n, preprocessor in enumerate(defaults) if preprocessor.__name__ == "Execute") + 1
    names.insert(after, f"{verdict.CompareRecords.__module__}.{verdict.CompareRecords.__name__}")
    feedback = [f"{p.__module__}.{p.__name__}" for p in GenerateFeedback.class_traits()["preprocessors"].default()]
    return (
        f"\n# benchmark: stock nbgrader autograde and generate_feedback\n"
        f"c.Autograde.autograde_preprocessors = {names!r}\n"
        'c.Execute.shutdown_kernel = "graceful"\n'
        f"c.GenerateFeedback.preprocessors = {feedback!r}\n"
        'c.GenerateFeedback.exporter_class = "nbconvert.exporters.HTMLExporter"\n'
        "c.HTMLExporter.preprocessors = []\n"
        "c.HTMLExporter.sanitize_html = False\n"
    )


@dataclass
class BenchmarkResult:
    notebooks: int
    stock_seconds: float
    """Stock ``nbgrader autograde``."""
    stock_feedback_seconds: float
    """Stock ``nbgrader generate_feedback`` after it."""
    end_to_end_seconds: float
    """Our ``grade`` of the download, the references stored."""
    first_run_seconds: float
    """Our ``grade`` of the download in a course with no stored references."""
    reference_seconds: float
    """Executing the assignments' reference solutions (stored by ours' first run of a course version)."""
    references: int
    differences: list[str]
    """``student/assignment/grade_id: stock X, end to end Y, first run Z`` for every grade cell scored differently
    by any side (empty: identical), and ``side: no feedback page for student/assignment`` for every page missing."""

    @property
    def end_to_end_ratio(self) -> float:
        """Stock's autograde and feedback time over our ``grade``'s, the references already stored (every run
        after a course version's first)."""
        return (self.stock_seconds + self.stock_feedback_seconds) / self.end_to_end_seconds

    @property
    def first_run_ratio(self) -> float:
        """Stock's autograde and feedback time, with the reference runs its verdict reads, over our ``grade``'s in a
        course with none stored (a course version's first run)."""
        return (self.stock_seconds + self.stock_feedback_seconds + self.reference_seconds) / self.first_run_seconds

    def report(self) -> str:
        per = self.notebooks or 1

        def line(name: str, seconds: float, note: str = "") -> str:
            return f"{name:<38}{seconds:7.1f} s ({seconds / per:.2f} s per notebook){note}"

        stock_end_to_end = self.stock_seconds + self.stock_feedback_seconds
        lines = [
            f"notebooks graded: {self.notebooks}",
            line("stock nbgrader autograde:", self.stock_seconds),
            line("stock nbgrader generate_feedback:", self.stock_feedback_seconds),
            line("ours, end to end (grade):", self.end_to_end_seconds, ", references stored"),
            line("ours, a course version's first run:", self.first_run_seconds, ", no references stored"),
            f"the {self.references} reference runs alone:           {self.reference_seconds:7.1f} s",
            f"ratio stock/ours, end to end: {self.end_to_end_ratio:.2f}x "
            f"({stock_end_to_end:.1f} s / {self.end_to_end_seconds:.1f} s)",
            f"ratio stock/ours, first run:  {self.first_run_ratio:.2f}x "
            f"({stock_end_to_end + self.reference_seconds:.1f} s with the reference runs"
            f" / {self.first_run_seconds:.1f} s)",
            "grades identical, every feedback page there: "
            + ("yes" if not self.differences else f"NO, {len(self.differences)} differences"),
        ]
        return "\n".join(lines + self.differences[:20])


def benchmark(
    course: Course,
    *,
    students: int = 4,
    assignment_ids: list[str] | None = None,
    workers: int | None = None,
    isolated: bool = True,
    progress: Callable[[str], None] = lambda line: None,
) -> BenchmarkResult:
    """Grade the generated batch of the assignments ``assignment_ids`` (default: all) every way (see the module
    docstring) and compare.

    Raises:
        CourseError: ``students`` < 1, no such assignment, or nbgrader or ``grade`` fails on any side.
    """
    if students < 1:
        raise CourseError("the benchmark needs at least one student")
    chosen = course.chosen(assignment_ids)
    options = {"isolated": isolated, "workers": workers}
    with tempfile.TemporaryDirectory(prefix="autograder-benchmark-") as scratch:
        download = write_download(generated_batch(course, students, chosen), Path(scratch) / "download")
        stock, submissions = _placed(course, Path(scratch) / "stock", download, chosen, extra_config=stock_config())
        end_to_end, _ = _released(course, Path(scratch) / "end_to_end", chosen)
        first_run, _ = _released(course, Path(scratch) / "first_run", chosen)
        progress(f"the {len(chosen)} reference solutions executed for their check records")
        started = time.monotonic()
        store_references(stock, chosen, **options)
        reference_seconds = time.monotonic() - started
        for assignment_id in chosen:  # the same records for our end to end
            stored = verdict.stored_reference(end_to_end, assignment_id)
            stored.parent.mkdir(parents=True, exist_ok=True)
            stored.write_bytes(verdict.stored_reference(stock, assignment_id).read_bytes())
        progress(f"stock nbgrader autograde of {students} students x {len(chosen)} notebooks")
        stock_seconds = _timed_nbgrader(stock, "autograde")
        progress("stock nbgrader generate_feedback")
        stock_feedback_seconds = _timed_nbgrader(stock, "generate_feedback")
        progress("ours, end to end: grade")
        started = time.monotonic()
        grade.grade(end_to_end, download, **options)
        end_to_end_seconds = time.monotonic() - started
        progress("ours, a course version's first run: grade with no stored references")
        started = time.monotonic()
        grade.grade(first_run, download, **options)
        first_run_seconds = time.monotonic() - started
        sides = {"stock": stock, "end to end": end_to_end, "first run": first_run}
        differences = _score_differences({name: scores(side) for name, side in sides.items()})
        differences += [
            f"{name}: no feedback page for {student}/{assignment}"
            for name, side in sides.items()
            for (student, assignment) in sorted({(s.student_id, s.assignment_id) for s in submissions})
            if not list((side.root / "feedback" / student / assignment).glob("*.html"))
        ]
    return BenchmarkResult(
        notebooks=len(submissions),
        stock_seconds=stock_seconds,
        stock_feedback_seconds=stock_feedback_seconds,
        end_to_end_seconds=end_to_end_seconds,
        first_run_seconds=first_run_seconds,
        reference_seconds=reference_seconds,
        references=len(chosen),
        differences=differences,
    )


def _timed_nbgrader(course: Course, command: str) -> float:
    """Seconds ``nbgrader COMMAND "*"`` took in ``course``.

    Raises:
        CourseError: it failed (its log is quoted).
    """
    started = time.monotonic()
    process = run_nbgrader(course, command, "*")
    if process.returncode != 0:
        raise nbgrader_failure(process, f"stock nbgrader {command}")
    return time.monotonic() - started


def _score_differences(sides: dict[str, dict[tuple[str, str, str], float]]) -> list[str]:
    """``student/assignment/grade_id: stock X, end to end Y, ...`` for every grade cell the sides score differently."""
    keys = sorted(set().union(*sides.values()))
    return [
        "/".join(key) + ": " + ", ".join(f"{name} {found.get(key)}" for name, found in sides.items())
        for key in keys
        if len({found.get(key) for found in sides.values()}) > 1
    ]


def store_references(course: Course, assignment_ids: list[str], *, isolated: bool, workers: int | None) -> None:
    """Execute the assignments' reference solutions, ``workers`` at a time
    (:func:`autograder.pipeline.batch.default_workers` by default), and store their check records where the batch
    looks for them (:func:`autograder.pipeline.verdict.stored_reference`), in the sandbox unless ``isolated`` is
    False, as the batch does."""
    context = multiprocessing.get_context("spawn")  # as the batch's workers: nothing of this process inherited
    count = workers or batch.default_workers()
    initial = {"initializer": batch.start_worker, "initargs": (os.getpid(),)}
    with concurrent.futures.ProcessPoolExecutor(count, mp_context=context, **initial) as pool:
        runs = {a: pool.submit(verdict.reference_records, course, a, sandboxed=isolated) for a in assignment_ids}
        for assignment_id, run in runs.items():
            stored = verdict.stored_reference(course, assignment_id)
            stored.parent.mkdir(parents=True, exist_ok=True)
            stored.write_text(json.dumps(run.result()), encoding="utf-8")


def generated_batch(course: Course, students: int, assignment_ids: list[str]) -> list[Sample]:
    """``students`` students (``student_000``...), each with each of ``assignment_ids``: the reference or a wrong
    answer, and a last markdown cell with the student's id."""
    batch_samples = []
    for assignment_id in assignment_ids:
        found = samples(course, assignment_id)
        reference = next(s for s in found if s.student_id == "reference")
        wrong = [s for s in found if s.student_id.startswith("wrong_")] or [reference]
        for number in range(students):
            chosen = reference if number % 2 == 0 else wrong[(number // 2) % len(wrong)]
            student_id = f"student_{number:03d}"
            notebook = copy.deepcopy(chosen.notebook)
            notebook.cells.append(nbformat.v4.new_markdown_cell(f"Handed in by {student_id}."))
            batch_samples.append(Sample(student_id, assignment_id, notebook, chosen.expected))
    return batch_samples


def scores(course: Course) -> dict[tuple[str, str, str], float]:
    """``(student, assignment, grade_id) -> score`` of every grade cell in a course's gradebook."""
    found = {}
    with Gradebook(course.db_url) as gradebook:
        for assignment in gradebook.assignments:
            for submission in gradebook.assignment_submissions(assignment.name):
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        found[(submission.student_id, assignment.name, grade.name)] = grade.score
    return found


def _released(
    course: Course, root: Path, assignment_ids: list[str], *, extra_config: str = ""
) -> tuple[Course, dict[str, nbformat.NotebookNode]]:
    """A scratch course at ``root`` (``extra_config`` appended to its nbgrader_config.py) with the grade cells of
    ``assignment_ids`` recorded in its gradebook, as a course's later runs find them, and their release
    notebooks."""
    scratch = copy_course(course, root)
    if extra_config:
        with (scratch.root / "nbgrader_config.py").open("a") as config:
            config.write(extra_config)
    return scratch, {assignment_id: update_gradebook(scratch, assignment_id) for assignment_id in assignment_ids}


def _placed(
    course: Course, root: Path, download: Path, assignment_ids: list[str], *, extra_config: str = ""
) -> tuple[Course, list[intake.Submission]]:
    """:func:`_released`, with the download (of ``assignment_ids``) placed in submitted/, and what was placed."""
    scratch, releases = _released(course, root, assignment_ids, extra_config=extra_config)
    with intake.opened(download, course=scratch, release=releases.__getitem__) as found:
        for submission in found.submissions:
            intake.place(scratch, submission, release=releases[submission.assignment_id])
    return scratch, found.submissions
