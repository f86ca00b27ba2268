"""Stage ``demo``: the main job on the bundled sample submissions, in a scratch course directory."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import report
from .course import Course, CourseError, copy_course
from .grade import grade
from .samples import Sample, samples, write_download


@dataclass
class DemoResult:
    table: str
    mismatches: list[str]
    """Samples whose grades differ from what they must get (empty when the course grades as designed)."""


def demo(course: Course, assignment_ids: list[str] | None = None) -> DemoResult:
    """Grade every sample submission of ``assignment_ids`` (default: all) through nbgrader, in a scratch copy.

    The course's own gradebook and folders are not touched.

    Raises:
        CourseError: an assignment id that is not in source/.
    """
    with tempfile.TemporaryDirectory(prefix="autograder-demo-") as scratch:
        scratch_course = copy_course(course, Path(scratch) / "course")
        chosen = assignment_ids or course.assignment_ids()
        unknown = sorted(set(chosen) - set(course.assignment_ids()))
        if unknown:
            raise CourseError(f"no such assignment in source/: {', '.join(unknown)}")
        found = [sample for assignment_id in chosen for sample in samples(course, assignment_id)]
        grading = grade(scratch_course, write_download(found, Path(scratch) / "download"))
    by_key = {(s.student_id, s.assignment_id): s for s in found}
    expected = [by_key[(r.student_id, r.assignment_id)] for r in grading.results]
    table = report.table(grading.results, extra={"expected": [f"{s.expected_total:g}" for s in expected]})
    mismatches = [m for result, sample in zip(grading.results, expected) for m in mismatches_of(result, sample)]
    return DemoResult(table=table, mismatches=mismatches)


def mismatches_of(result: report.SubmissionResult, sample: Sample) -> list[str]:
    """How a graded sample differs from what it must get, one line per grade cell."""
    got = {task.grade_id: task.score for task in result.tasks}
    where = f"{sample.student_id}/{sample.assignment_id}"
    if result.status != sample.expected_status:
        return [f"{where}: status {result.status} instead of {sample.expected_status} ({'; '.join(result.notes)})"]
    return [
        f"{where}: {name} scored {got.get(name)} instead of {score:g}"
        for name, score in sample.expected.items()
        if got.get(name) != score
    ]
