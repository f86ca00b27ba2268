"""Stage ``benchmark``: our autograde against stock ``nbgrader autograde``, same batch, same machine, one run.

The batch: ``students`` generated students, each submitting all the course's
notebooks; for every assignment, even-numbered students hand in the reference
solution and odd-numbered ones a wrong answer from ``tests/submissions``
(cycling through them), so both passing and failing tests are timed. Each
notebook ends with a markdown cell naming its student, so no two are
identical (the batch would execute identical notebooks once, and real
students' notebooks differ).

Each side gets its own scratch course directory, gradebook and the same
placed submissions (set up untimed). Timed:

- **stock**: ``nbgrader autograde "*"`` with nbgrader's own autograde
  preprocessors and ``Execute`` (kernels as plain processes, graceful
  shutdown), one notebook at a time, and the course's verdict step
  (:class:`autograder.pipeline.verdict.CompareRecords`) right after ``Execute``:
  the course's hidden tests hand the kernel no expected value, so nbgrader alone
  cannot judge them; the verdict reads the same stored reference records as ours;
- **ours**: what ``grade`` does for the same result
  (:class:`autograder.grading.session.Passes` without feedback): the
  batch (:mod:`autograder.pipeline.batch`, kernels in the sandbox unless ``isolated``
  is False), each submission autograded, as soon as it is executed, by one
  nbgrader process with the course's preprocessors;
- **the references**, timed on their own before both: each assignment's
  reference solution executed for its check records, as the batch does the
  first time it grades a version of source/ and ``checks.py`` (it stores them,
  :func:`autograder.pipeline.verdict.stored_reference`, and every later run reuses
  them); both sides then read them. The report gives the ratio with and without them.

Then every grade cell's score in the two gradebooks is compared.
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
from nbgrader.converters import Autograde

from ..pipeline import batch
from ..pipeline.intake import submissions as intake
from ..grading import session
from ..pipeline import verdict
from ..course import Course, CourseError, copy_course, nbgrader_failure, run_nbgrader
from ..pipeline.releases import update_gradebook
from ..authoring.samples import Sample, samples, write_download


def stock_config() -> str:
    """Appended to the stock side's nbgrader_config.py: nbgrader's own default autograde preprocessors (read
    from nbgrader itself), the course's verdict right after ``Execute`` (without it no hidden check is judged),
    and ``Execute``'s default graceful kernel shutdown."""
    defaults = Autograde.class_traits()["autograde_preprocessors"].default()
    names = [f"{preprocessor.__module__}.{preprocessor.__name__}" for preprocessor in defaults]
    after = next(n for n, preprocessor in enumerate(defaults) if preprocessor.__name__ == "Execute") + 1
    names.insert(after, f"{verdict.CompareRecords.__module__}.{verdict.CompareRecords.__name__}")
    return f"\n# benchmark: stock nbgrader autograde\nc.Autograde.autograde_preprocessors = {names!r}\n" + (
        'c.Execute.shutdown_kernel = "graceful"\n'
    )


@dataclass
class BenchmarkResult:
    notebooks: int
    stock_seconds: float
    ours_seconds: float
    reference_seconds: float
    """Executing the assignments' reference solutions (stored by ours' first run of a course version)."""
    references: int
    differences: list[str]
    """``student/assignment/grade_id: stock X, ours Y`` for every grade cell scored differently (empty: identical)."""

    @property
    def ratio(self) -> float:
        """Stock's time over ours, the references already stored (every run after a course version's first)."""
        return self.stock_seconds / self.ours_seconds

    @property
    def first_run_ratio(self) -> float:
        """Stock's time over ours, each with the reference runs both need (a course version's first run)."""
        return (self.stock_seconds + self.reference_seconds) / (self.ours_seconds + self.reference_seconds)

    def report(self) -> str:
        per = self.notebooks or 1
        lines = [
            f"notebooks graded: {self.notebooks}",
            f"stock nbgrader autograde: {self.stock_seconds:7.1f} s ({self.stock_seconds / per:.2f} s per notebook)",
            f"ours (batch + autograde): {self.ours_seconds:7.1f} s ({self.ours_seconds / per:.2f} s per notebook), "
            "references stored",
            f"the {self.references} reference runs:   {self.reference_seconds:7.1f} s (a course version's first run)",
            f"ratio stock/ours: {self.ratio:.2f}x; with the reference runs {self.first_run_ratio:.2f}x",
            "grades identical: " + ("yes" if not self.differences else f"NO, {len(self.differences)} differ"),
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
    """Grade the generated batch of the assignments ``assignment_ids`` (default: all) both ways (see the module
    docstring) and compare.

    Raises:
        CourseError: ``students`` < 1, no such assignment, or nbgrader fails on either side.
    """
    if students < 1:
        raise CourseError("the benchmark needs at least one student")
    chosen = course.chosen(assignment_ids)
    with tempfile.TemporaryDirectory(prefix="autograder-benchmark-") as scratch:
        download = write_download(generated_batch(course, students, chosen), Path(scratch) / "download")
        stock, _ = _placed(course, Path(scratch) / "stock", download, chosen, extra_config=stock_config())
        ours, submissions = _placed(course, Path(scratch) / "ours", download, chosen)
        progress(f"the {len(chosen)} reference solutions executed for their check records")
        started = time.monotonic()
        store_references(ours, chosen, isolated=isolated, workers=workers)
        reference_seconds = time.monotonic() - started
        for assignment_id in chosen:  # the same records for the stock side's verdict
            stored = verdict.stored_reference(stock, assignment_id)
            stored.parent.mkdir(parents=True, exist_ok=True)
            stored.write_bytes(verdict.stored_reference(ours, assignment_id).read_bytes())
        progress(f"stock nbgrader autograde of {students} students x {len(chosen)} notebooks")
        started = time.monotonic()
        process = run_nbgrader(stock, "autograde", "*")
        if process.returncode != 0:
            raise nbgrader_failure(process, "stock nbgrader autograde")
        stock_seconds = time.monotonic() - started
        progress("ours: the batch, each submission autograded by one nbgrader process as soon as it is executed")
        started = time.monotonic()
        with session.Passes(ours, isolated=isolated, workers=workers, feedback=False) as nbgrader:
            nbgrader.run(submissions, progress=progress)
        ours_seconds = time.monotonic() - started
        stock_scores, our_scores = scores(stock), scores(ours)
    differences = [
        f"{'/'.join(key)}: stock {stock_scores.get(key)}, ours {our_scores.get(key)}"
        for key in sorted(stock_scores.keys() | our_scores.keys())
        if stock_scores.get(key) != our_scores.get(key)
    ]
    return BenchmarkResult(len(submissions), stock_seconds, ours_seconds, reference_seconds, len(chosen), differences)


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


def _placed(
    course: Course, root: Path, download: Path, assignment_ids: list[str], *, extra_config: str = ""
) -> tuple[Course, list[intake.Submission]]:
    """A scratch course at ``root`` with the download (of ``assignment_ids``) placed in submitted/ and its
    gradebook set up, and what was placed."""
    scratch = copy_course(course, root)
    if extra_config:
        with (scratch.root / "nbgrader_config.py").open("a") as config:
            config.write(extra_config)
    releases = {assignment_id: update_gradebook(scratch, assignment_id) for assignment_id in assignment_ids}
    with intake.opened(download, course=scratch, release=releases.__getitem__) as found:
        for submission in found.submissions:
            intake.place(scratch, submission, release=releases[submission.assignment_id])
    return scratch, found.submissions
