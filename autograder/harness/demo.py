"""Stage ``demo``: the main job on the bundled sample submissions, in a scratch course directory."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..results import report
from ..course import Course, CourseError, copy_course
from ..grading.grade import Grading, grade
from ..authoring.samples import HOSTILE_DIR, VARIANT_FILES, Sample, samples, write_download


@dataclass
class DemoResult:
    table: str
    mismatches: list[str]
    """Samples whose grades differ from what they must get (empty when the course grades as designed)."""
    summary: str
    """Per assignment and in total: reference at full marks, release at zero, wrong answers and each class of
    hostile submissions caught (they lost exactly their cells' points), valid alternatives kept."""
    grading: Grading
    """The grading run, in the scratch course (its grades.csv, task_results.csv and feedback/ are kept)."""


def demo(
    course: Course,
    assignment_ids: list[str] | None = None,
    *,
    every: bool = False,
    into: Path | None = None,
    isolated: bool = True,
    workers: int | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> DemoResult:
    """Grade the sample submissions of ``assignment_ids`` (default: all) through nbgrader, in a scratch copy.

    ``every``: all samples; by default the representative set of each assignment (:func:`representative`).
    ``into``: the scratch course is made in ``into/course`` (default: in a new temporary folder). It is
    kept, so that its grades.csv, task_results.csv and feedback/ can be read; the course's own
    gradebook and folders are not touched. ``isolated``, ``workers``, ``progress``: see
    :func:`autograder.grading.grade.grade`.

    Raises:
        CourseError: an assignment id that is not in source/.
    """
    chosen = assignment_ids or course.assignment_ids()
    unknown = sorted(set(chosen) - set(course.assignment_ids()))
    if unknown:
        raise CourseError(f"no such assignment in source/: {', '.join(unknown)}")
    scratch = into or Path(tempfile.mkdtemp(prefix="autograder-demo-"))
    scratch_course = copy_course(course, scratch / "course")
    found = [
        sample
        for assignment_id in chosen
        for sample in (samples if every else representative)(course, assignment_id)
    ]
    with tempfile.TemporaryDirectory(prefix="autograder-demo-download-") as download_folder:
        download = write_download(found, Path(download_folder))
        grading = grade(scratch_course, download, isolated=isolated, workers=workers, progress=progress)
    by_key = {(s.student_id, s.assignment_id): s for s in found}
    expected = [by_key[(r.student_id, r.assignment_id)] for r in grading.results]
    table = report.table(grading.results, extra={"expected": [f"{s.expected_total:g}" for s in expected]})
    problems = {(r.student_id, r.assignment_id): mismatches_of(r, s) for r, s in zip(grading.results, expected)}
    mismatches = [line for lines in problems.values() for line in lines]
    return DemoResult(table=table, mismatches=mismatches, summary=summary(chosen, problems), grading=grading)


def representative(course: Course, assignment_id: str) -> list[Sample]:
    """The samples the default demo grades for one assignment (a subset of
    :func:`autograder.authoring.samples.samples`).

    The reference, the unchanged release, for each graded test cell the first wrong answer that loses points of it
    (unless one already chosen does), the first valid alternative, and the first sample of each class of
    ``tests/hostile/`` (:data:`HOSTILE_KINDS`; ``demo --all`` grades every one), in the order
    :func:`~autograder.authoring.samples.samples` gives them.
    """
    found = samples(course, assignment_id)
    graded = [name for name, points in found[0].expected.items() if points > 0]  # found[0]: the reference
    kept = [s for s in found if s.student_id.startswith(("reference", "unchanged_release"))]
    for prefix in [*HOSTILE_PREFIXES, "valid_"]:
        kept += [s for s in found if s.student_id.startswith(prefix)][:1]
    wrong = [s for s in found if s.student_id.startswith("wrong_")]
    full = found[0].expected
    for name in graded:
        if not any(s.expected[name] < full[name] for s in kept if s in wrong):
            kept += [s for s in wrong if s.expected[name] < full[name]][:1]
    return [s for s in found if s in kept]


HOSTILE_KINDS = {f"{kind}_": table for kind, (folder, table) in VARIANT_FILES.items() if folder == HOSTILE_DIR}
"""Student-id prefix -> the class of the hostile samples of ``tests/hostile/`` (the name of their tables)."""
HOSTILE_PREFIXES = tuple(HOSTILE_KINDS)
"""Student-id prefixes of the samples in ``tests/hostile/``."""


def summary(assignment_ids: list[str], problems: dict[tuple[str, str], list[str]]) -> str:
    """One row per assignment and a total: how many samples of each kind graded as they must (``got/all``), each
    class of hostile samples (:data:`HOSTILE_KINDS`) in a column of its own."""
    kinds = [("reference", "reference at full marks"), ("unchanged_release", "release at zero")]
    kinds += [("wrong_", "wrong answers caught"), *HOSTILE_KINDS.items(), ("valid_", "valid alternatives kept")]
    header = ["assignment", *(title for _, title in kinds)]
    rows = []
    for assignment in [*assignment_ids, "total"]:
        row = [assignment]
        for prefix, _ in kinds:
            chosen = [
                p for (student, a), p in problems.items() if student.startswith(prefix) and assignment in (a, "total")
            ]
            row.append(f"{sum(1 for p in chosen if not p)}/{len(chosen)}")
        rows.append(row)
    return report.columns(header, rows)


def mismatches_of(result: report.SubmissionResult, sample: Sample) -> list[str]:
    """How a graded sample differs from what it must get, one line per grade cell."""
    got = {task.grade_id: task.score for task in result.tasks}
    where = f"{sample.student_id}/{sample.assignment_id}"
    if result.status != sample.expected_status:
        return [f"{where}: status {result.status} instead of {sample.expected_status} ({'; '.join(result.notes)})"]
    statuses = {task.grade_id: task.status for task in result.tasks}
    return [
        f"{where}: {name} scored {got.get(name)} instead of {score:g}"
        for name, score in sample.expected.items()
        if got.get(name) != score
    ] + [
        f"{where}: {name} has status {statuses.get(name)} instead of {status}"
        for name, status in sample.expected_task_status.items()
        if statuses.get(name) != status
    ]
