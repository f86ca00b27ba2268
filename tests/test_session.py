"""One nbgrader process answers a run's requests in order; its failures are outcomes, its end an error."""

import csv
import os
import signal

import pytest

from autograder.course import CourseError
from autograder.grading.session import feedback_processes
from autograder.pipeline.nbgrader_process import Session


def test_requests_are_answered_in_order_a_failed_one_says_why_and_those_left_when_nbgrader_ends_fail(course_copy):
    with Session(course_copy) as nbgrader:
        missing = nbgrader.autograde("01_tensors", "nobody")
        export = nbgrader.export(course_copy.root / "grades.csv")
        later = nbgrader.generate_feedback("01_tensors", "nobody")
        assert not missing.result().success
        assert "No notebooks were matched" in missing.result().log and "NbGraderException" in missing.result().error
        assert export.result().success and not later.result().success
        with (course_copy.root / "grades.csv").open() as handle:
            assert next(csv.reader(handle))[:4] == ["assignment", "duedate", "timestamp", "student_id"]

        os.kill(nbgrader._process.pid, signal.SIGKILL)
        nbgrader._process.wait()
        with pytest.raises(CourseError, match=r"nbgrader ended \(exit -9\)"):
            nbgrader.autograde("01_tensors", "nobody").result(timeout=60)


def test_one_feedback_process_serves_two_workers():
    """A page costs about a third of a notebook's execution, a process more 1.0 to 1.3 s of CPU to start."""
    assert [feedback_processes(workers) for workers in (1, 2, 3, 4, 16)] == [1, 1, 2, 2, 8]
